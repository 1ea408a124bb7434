"""IQNLightningModule: the learner. Online and target IQN networks, mini-race quantile loss.

Manual optimization because the target network is updated by hand (soft update every N
sampled transitions), steps with a non-finite loss are skipped and counted, and the lr
follows the frame counter rather than the step count. The target network is frozen and
outside the optimizer. Every `publish_every_batches` the acting weights go to the shared
network the collectors pull from: the online weights, or with `acting_ema_batches` > 0 their
exponential moving average over about that many batches (Polyak averaging of the iterates),
which a greedy policy follows far more steadily than the online weights, whose argmax flips
between consecutive batches where the action gaps are small. With `reset_every_frames` > 0
the online network is shrunk towards a fresh draw on a frame schedule (agent/resets.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import lightning as L
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from omegaconf import MISSING

from trackmind.agent.churn import ChurnReduction
from trackmind.agent.loss import Munchausen, NonFiniteGuard, bound_clipped_share, iqn_loss
from trackmind.agent.network import (
    TAU_DRAWS,
    IQNNetwork,
    SpectralLinear,
    conv_layout_for,
    midpoint_taus,
    stratified_symmetric_taus,
)
from trackmind.agent.resets import reset_optimizer_state_, reset_slot, shrink_perturb_
from trackmind.agent.self_predictive import SelfPredictiveHead, self_predictive_loss
from trackmind.env.mirror import MIRRORED_ACTIONS, FloatMirror, mirror_batch
from trackmind.errors import ConfigError, check_schema, require
from trackmind.schedules import Schedule
from trackmind.training.adam_step import adam_state, clipped_adam_step_
from trackmind.training.captured_step import CapturedStep
from trackmind.training.side_thread import on_side_thread


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, for the parameters (buffers are fixed,
    but for the power-iteration vectors of spectral normalisation, taken from online).

    One foreach kernel for all parameters: a GPU learner runs it every batch. The vectors
    are copied because an averaged copy that is never run in training mode (the acting
    average) would otherwise keep dividing by the singular value of its first weights."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
        for mine, theirs in zip(power_iteration_vectors(target), power_iteration_vectors(online)):
            mine.copy_(theirs)


def power_iteration_vectors(net: torch.nn.Module) -> list[torch.Tensor]:
    """The ``u`` buffers of a network's SpectralLinear layers, in module order."""
    return [m.u for m in net.modules() if isinstance(m, SpectralLinear)]


class LossParts(NamedTuple):
    """What compute_loss gives: the loss, per-sample losses (priorities, logs), the online
    quantiles (B, N, A), and the loss's own figures (e.g. train/bound_clipped)."""

    loss: torch.Tensor
    per_sample: torch.Tensor
    z: torch.Tensor
    stats: dict[str, torch.Tensor]


def q_stats(z: torch.Tensor) -> dict[str, torch.Tensor]:
    """Logged figures of the online quantiles z (B, N, A), as device tensors (no sync)."""
    q = z.detach().float().mean(dim=1)
    top2 = q.topk(2, dim=1).values if q.shape[1] > 1 else torch.cat([q, q], dim=1)
    return {
        "train/q_mean": q.mean(),
        "train/q_max": q.max(dim=1).values.mean(),
        # best minus second-best action: what decides the greedy policy (agent/loss.py)
        "train/action_gap": (top2[:, 0] - top2[:, 1]).mean(),
    }


GRAPH_INPUTS = (
    "state_img",
    "next_state_img",
    "state_float",
    "next_state_float",
    "action",
    "reward",
    "discount",
    "weights",
    "target_max",  # only with a value bound (buffer.value_bound_rate)
)


def ema_rate(updates: int, horizon_batches: float) -> float:
    """Weight of the newest iterate in the acting average after `updates` updates.

    1 / (updates + 1) at first (the plain mean of the iterates so far, so the random
    initial weights fade at once), then 1 / horizon_batches (an exponential average).
    """
    return 1.0 / min(updates + 1.0, float(horizon_batches))


@dataclass
class ScheduleConfig:
    """A schedule by frames: [[frame, value], ...] points and how to go between them."""

    points: Any = MISSING
    kind: str = "linear"  # linear | exponential | staircase

    def __post_init__(self) -> None:
        kinds = ("linear", "exponential", "staircase")
        require(self.kind in kinds, "kind", f"must be {', '.join(kinds)}, got {self.kind!r}")


def schedule_from(cfg: Mapping | float, key: str) -> Schedule:
    """A Schedule from `{points, kind}` or a bare number (constant)."""
    if isinstance(cfg, (int, float)) and not isinstance(cfg, bool):
        return Schedule([(0.0, float(cfg))], "linear")
    if not isinstance(cfg, Mapping):
        raise ConfigError(key, f"must be a number or {{points, kind}}, got {cfg!r}")
    sc = check_schema(cfg, ScheduleConfig, key)
    return Schedule.from_config(sc.points, sc.kind, f"{key}.points")


LEARNER_COMPILE_MODES = (
    "none",
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",  # inside learner.cuda_graph
)

TARGET_TAUS = tuple(TAU_DRAWS)


@dataclass
class LearnerConfig:
    """The `learner` group (conf/learner/iqn.yaml, where the defaults live): the module's
    optimiser, loss and target/publish cadence, and how the learner samples (batch_size and
    replay_ratio, which the DataModule applies)."""

    batch_size: int = MISSING
    optimizer: str = MISSING  # radam | adam
    adam_eps: float = MISSING
    lr: Any = MISSING  # schedule by frames: {points: [[frame, value], ...], kind}
    weight_decay: float = MISSING
    gamma: Any = MISSING  # schedule by frames, values in (0, 1]
    kappa: float = MISSING
    double_dqn: bool = MISSING
    advantage_learning: float = MISSING  # alpha in [0, 1): gap-increasing target (agent/loss.py)
    # Munchausen targets (agent/loss.py): alpha (0: off), softmax temperature, lower clip of
    # the log-policy bonus; defaults here too, for checkpoints of runs from before the keys
    munchausen_alpha: float = 0.0
    munchausen_temperature: float = 0.03
    munchausen_clip: float = -1.0
    # how the target's next-state taus are drawn: random (uniform, as IQN) or stratified (one
    # per stratum, mirrored): the same expectation, a steadier bootstrapped value
    target_taus: str = "random"
    grad_clip_norm: float = MISSING
    target_tau: float = MISSING
    target_update_every_transitions: int = MISSING
    replay_ratio: float = MISSING
    publish_every_batches: int = MISSING
    max_nonfinite_in_a_row: int = MISSING
    acting_ema_batches: float = MISSING
    # torch.compile mode of the learner's forward passes (none: eager); a default here too,
    # because the checkpoints of runs from before the key have no value for it
    compile: str = "none"
    # the loss (target, TD errors, quantile Huber) compiled too, in the same mode: its ~40
    # small elementwise kernels (forward and backward) fused into a few
    compile_loss: bool = False
    # the captured step's clipping and (R)Adam step as one function (training/adam_step.py),
    # compiled on a GPU: torch's capturable RAdam launches dozens of tiny kernels a step
    compile_optimizer: bool = False
    # the whole update (forwards, backward, clipping, optimizer) as one replayed CUDA graph
    # (training/captured_step.py); a GPU learner in fp32 or bf16
    cuda_graph: bool = False
    # shrink-and-perturb resets of the online network (agent/resets.py): every N frames
    # (0: off), none from `reset_until_frames` on (0: no end); weights kept `reset_shrink`
    # of the way, the modules of `reset_modules` drawn afresh
    reset_every_frames: int = 0
    reset_until_frames: int = 0
    reset_shrink: float = 0.5
    reset_modules: list[str] = field(default_factory=lambda: ["advantage", "value"])
    # the share of each batch the learner mirrors left to right (env/mirror.py): states,
    # frames and actions of those samples swapped for their mirror twins (0: off)
    mirror_share: float = 0.0
    # the self-predictive auxiliary loss (agent/self_predictive.py): its weight beside the
    # value loss (0: off) and the width of its projection
    self_predictive_weight: float = 0.0
    self_predictive_dim: int = 128
    # value-churn reduction (agent/churn.py, CHAIN): the squared change of the Q values of the
    # batch's first `churn_rows` next states since the last update, times `churn_weight`
    # (0: off); an eager learner only
    churn_weight: float = 0.0
    churn_rows: int = 32
    # the target's forward at s' on a thread beside the online forward at s
    # (training/side_thread.py): the same step, sooner, where the learner runs eagerly on
    # a CPU; no effect with learner.compile or learner.cuda_graph, or on a GPU
    target_thread: bool = True
    # the batch in two halves, each half's forwards, loss and backward on a thread of its own,
    # the gradients summed: the same update up to float rounding, on an eager CPU learner
    # (training/side_thread.py); not with the self-predictive loss (a mean over a batch's
    # non-terminal samples) or spectral normalisation (power iterations in the forward)
    split_step: bool = False

    def __post_init__(self) -> None:
        key = "learner"
        require(
            self.compile in LEARNER_COMPILE_MODES,
            f"{key}.compile",
            f"must be one of {', '.join(LEARNER_COMPILE_MODES)}, got {self.compile!r}",
        )
        require(
            not self.compile_loss or self.compile in ("default", "max-autotune-no-cudagraphs"),
            f"{key}.compile_loss",
            "compiles the loss in learner.compile's mode, which must be default or "
            f"max-autotune-no-cudagraphs (the loss's outputs are kept past the next step; "
            f"a mode of CUDA graphs would overwrite them), got {self.compile!r}",
        )
        require(
            not self.split_step or self.self_predictive_weight == 0,
            f"{key}.split_step",
            "splits the batch, and the self-predictive loss is a mean over the whole batch: "
            "set learner.self_predictive_weight=0 or learner.split_step=false",
        )
        require(
            self.churn_weight == 0 or not (self.split_step or self.cuda_graph),
            f"{key}.churn_weight",
            "compares each update with the one before on the eager learner's whole batch: "
            "set learner.split_step=false and learner.cuda_graph=false, or churn_weight=0",
        )
        require(
            not self.compile_optimizer or self.cuda_graph,
            f"{key}.compile_optimizer",
            "fuses the captured step's clipping and optimizer: it needs learner.cuda_graph=true",
        )
        for name, strict in (
            ("batch_size", True),
            ("adam_eps", True),
            ("weight_decay", False),
            ("kappa", False),
            ("grad_clip_norm", True),
            ("target_update_every_transitions", True),
            ("replay_ratio", True),
            ("publish_every_batches", True),
            ("max_nonfinite_in_a_row", True),
            ("acting_ema_batches", False),
            ("reset_every_frames", False),
            ("reset_until_frames", False),
            ("self_predictive_weight", False),
            ("self_predictive_dim", True),
            ("churn_weight", False),
            ("churn_rows", True),
        ):
            v = getattr(self, name)
            require(
                v > 0 if strict else v >= 0,
                f"{key}.{name}",
                f"must be a {'positive' if strict else 'non-negative'} number, got {v!r}",
            )
        require(
            self.churn_weight == 0 or self.churn_rows <= self.batch_size,
            f"{key}.churn_rows",
            f"must be at most learner.batch_size ({self.batch_size}), got {self.churn_rows!r}",
        )
        require(
            self.target_taus in TARGET_TAUS,
            f"{key}.target_taus",
            f"must be one of {', '.join(TARGET_TAUS)}, got {self.target_taus!r}",
        )
        al = self.advantage_learning
        require(0 <= al < 1, f"{key}.advantage_learning", f"must be in [0, 1), got {al!r}")
        ma, mt, mc = self.munchausen_alpha, self.munchausen_temperature, self.munchausen_clip
        require(0 <= ma <= 1, f"{key}.munchausen_alpha", f"must be in [0, 1], got {ma!r}")
        require(mt > 0, f"{key}.munchausen_temperature", f"must be positive, got {mt!r}")
        require(mc < 0, f"{key}.munchausen_clip", f"must be negative, got {mc!r}")
        require(
            ma == 0 or not (self.double_dqn or al > 0),
            f"{key}.munchausen_alpha",
            "Munchausen targets replace double DQN and advantage learning: turn those off",
        )
        ev, un = self.reset_every_frames, self.reset_until_frames
        require(
            un == 0 or ev == 0 or un > ev,
            f"{key}.reset_until_frames",
            f"must be 0 or above reset_every_frames ({ev}), else no reset falls: got {un!r}",
        )
        ms = self.mirror_share
        require(0 <= ms <= 1, f"{key}.mirror_share", f"must be in [0, 1], got {ms!r}")
        rs = self.reset_shrink
        require(0 <= rs <= 1, f"{key}.reset_shrink", f"must be in [0, 1], got {rs!r}")
        tau = self.target_tau
        require(0 < tau <= 1, f"{key}.target_tau", f"must be in (0, 1], got {tau!r}")
        require(
            self.optimizer in ("radam", "adam"),
            f"{key}.optimizer",
            f"must be radam or adam, got {self.optimizer!r}",
        )
        schedule_from(self.lr, f"{key}.lr")
        g = schedule_from(self.gamma, f"{key}.gamma")
        require(all(0 < v <= 1 for _, v in g.points), f"{key}.gamma", "values must be in (0, 1]")

    def munchausen(self) -> Munchausen | None:
        """The loss's Munchausen settings, or None when munchausen_alpha is 0 (off)."""
        if self.munchausen_alpha == 0:
            return None
        return Munchausen(
            float(self.munchausen_alpha),
            float(self.munchausen_temperature),
            float(self.munchausen_clip),
        )


def learner_config(cfg: Mapping | LearnerConfig, key: str = "learner") -> LearnerConfig:
    """The validated learner group (one-line ConfigError naming the key)."""
    return cfg if isinstance(cfg, LearnerConfig) else check_schema(cfg, LearnerConfig, key)


def check_cuda_graph(learner: LearnerConfig, accelerator: str, precision: Any, cuda: bool) -> None:
    """learner.cuda_graph needs a CUDA trainer in fp32 or bf16 (one-line ConfigError): a graph
    replays CUDA kernels, and fp16 loss scaling reads the gradients on the host every step."""
    if not learner.cuda_graph:
        return
    also = " learner.compile_optimizer=false" if learner.compile_optimizer else ""
    require(
        accelerator in ("gpu", "cuda", "auto") and cuda,
        "learner.cuda_graph",
        "needs a CUDA GPU learner (trainer.accelerator=gpu on a machine with CUDA); "
        f"set learner.cuda_graph=false{also} here",
    )
    require(
        not str(precision).startswith("16"),
        "learner.cuda_graph",
        f"needs trainer.precision 32-true or bf16-mixed, got {precision!r}",
    )


def make_capturable(opt: torch.optim.Optimizer, device: torch.device, lr: float) -> None:
    """Ready an optimizer for a captured step: capturable foreach updates, the lr a device
    tensor that the schedule writes into, step counts on the device. configure_optimizers
    makes it so; a state loaded from an eager run's checkpoint brings floats and host steps."""
    for group in opt.param_groups:
        group["capturable"], group["foreach"] = True, True
        if not isinstance(group["lr"], torch.Tensor) or group["lr"].device != device:
            group["lr"] = torch.tensor(float(lr), device=device)
        for p in group["params"]:
            state = opt.state.get(p, {})
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(device=device, dtype=torch.float32)


def compiled_forwards(online: torch.nn.Module, target: torch.nn.Module, mode: str):
    """(online, target) callables of (img, floats, taus) -> (Z, features): the networks'
    forward_features (mode none) or torch.compile of it. Functions, never modules, so that
    holding them registers no submodule."""
    if mode == "none":
        return online.forward_features, target.forward_features
    return (
        torch.compile(online.forward_features, mode=mode),
        torch.compile(target.forward_features, mode=mode),
    )


def compiled_loss(mode: str, compile_loss: bool) -> Callable[..., tuple]:
    """iqn_loss itself, or torch.compile of it (a pure function: the compiled loss is the
    eager one, fused)."""
    return torch.compile(iqn_loss, mode=mode) if compile_loss else iqn_loss


def count_manual_step(opt: LightningOptimizer) -> None:
    """Count a step that bypassed LightningOptimizer.step. Lightning counts manual
    optimisation steps (trainer.global_step) only there, and global_step drives weight
    publishing, checkpoint steps, metric steps and trainer.max_steps; the captured step
    steps the raw optimizer inside its graph, so without this a run never publishes."""
    opt._on_before_step()
    opt._on_after_step()


class IQNLightningModule(L.LightningModule):
    """Learns IQN on collated mini-race batches; see the module docstring."""

    def __init__(
        self,
        network: IQNNetwork,
        learner: Mapping | LearnerConfig,
        n_quantiles_train: int = 8,
        n_quantiles_target: int = 8,
        policy_cvar: float = 1.0,
        frames: Callable[[], int] = lambda: 0,
        publish: Callable[[torch.nn.Module], Any] | None = None,
        on_priorities: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
        float_mirror: FloatMirror | None = None,
    ) -> None:
        super().__init__()
        self.cfg = learner_config(learner)
        self.mirror_share = float(self.cfg.mirror_share)
        require(
            self.mirror_share == 0 or float_mirror is not None,
            "learner.mirror_share",
            "needs the observation's float mirror (RunPlan.float_mirror)",
        )
        if float_mirror is not None:  # not persistent: checkpoints keep their keys
            self.register_buffer("mirror_perm", torch.as_tensor(float_mirror.perm), False)
            self.register_buffer("mirror_sign", torch.as_tensor(float_mirror.sign), False)
            self.register_buffer("mirror_action", torch.as_tensor(MIRRORED_ACTIONS), False)
        self.automatic_optimization = False
        self.online_network = network
        self.target_network = copy.deepcopy(network)
        self.target_network.requires_grad_(False)
        self.ema_batches = float(self.cfg.acting_ema_batches)
        self.acting_network = None
        if self.ema_batches > 0:
            self.acting_network = copy.deepcopy(network)
            self.acting_network.requires_grad_(False)
        self.acting_updates = 0
        self.n_train = int(n_quantiles_train)
        self.munchausen = self.cfg.munchausen()  # made once: compute_loss runs every batch
        self.n_target = int(n_quantiles_target)
        self.policy_cvar = float(policy_cvar)  # network.policy_cvar: the target's risk level
        require(
            self.cfg.target_taus != "stratified" or self.n_target % 2 == 0,
            "learner.target_taus",
            f"stratified taus need an even network.n_quantiles_target, got {self.n_target}",
        )
        self.target_taus = TAU_DRAWS[self.cfg.target_taus]
        self.lr_schedule = schedule_from(self.cfg.lr, "learner.lr")
        self.gamma_schedule = schedule_from(self.cfg.gamma, "learner.gamma")
        self.frames = frames
        self.publish = publish
        self.on_priorities = on_priorities
        self.guard = NonFiniteGuard(self.cfg.max_nonfinite_in_a_row)
        self.samples_since_target_update = 0
        self.samples_learned = 0
        self.last_stats: dict[str, float] = {}
        # the forward passes compute_loss runs: the networks themselves, or compiled
        # functions over them (plain attributes, not submodules: state_dict keeps its keys,
        # and the weights stay the networks', updated in place)
        self._forwards_of: int | None = None  # id of the networks the forwards were made for
        self.captured: CapturedStep | None = None  # with cuda_graph, made at the first step
        self._nonfinite: torch.Tensor | None = None  # device counters: [in a row, in total]
        self._raw_optimizer: torch.optim.Optimizer | None = None  # the one device_update steps
        self._adam_step: Callable[..., torch.Tensor] | None = None  # compile_optimizer's step
        self.self_predictive: SelfPredictiveHead | None = None
        if self.cfg.self_predictive_weight > 0:
            self.self_predictive = SelfPredictiveHead(
                network.feature_dim, network.n_actions, int(self.cfg.self_predictive_dim)
            )
        require(
            not self.cfg.split_step or not power_iteration_vectors(network),
            "learner.split_step",
            "splits the batch over two threads, and spectral normalisation updates its power "
            "iterations in every forward: set network.spectral_norm=false or "
            "learner.split_step=false",
        )
        self.churn: ChurnReduction | None = None
        if self.cfg.churn_weight > 0:
            self.churn = ChurnReduction(self.cfg.churn_weight, self.cfg.churn_rows)
        self.resets_done = 0
        self.reset_slot = 0  # schedule slot (frames // reset_every_frames) of the last reset
        names = dict(network.named_modules())
        bad = [m for m in self.cfg.reset_modules if not m or m not in names]
        require(
            not bad,
            "learner.reset_modules",
            f"the network has no module {', '.join(map(repr, bad))} "
            f"(its top-level modules: {', '.join(n for n, _ in network.named_children())})",
        )

    # --- optimisation -------------------------------------------------------------------
    def configure_optimizers(self):
        # the networks are on the learner's device now, and no optimizer holds their tensors
        # yet: on a GPU their convolutions go channels_last (agent/network.conv_layout_for)
        for net in (self.online_network, self.target_network, self.acting_network):
            if net is not None:
                conv_layout_for(net, self.device)
        opt_cls = torch.optim.RAdam if self.cfg.optimizer == "radam" else torch.optim.Adam
        lr: float | torch.Tensor = self.lr_schedule(0)
        extra = {}
        if self.cfg.cuda_graph and self.device.type == "cuda":
            # a graph replays the optimizer's kernels: its step count and lr live on the
            # device (capturable), and the lr schedule writes into that tensor
            lr = torch.tensor(lr, device=self.device)
            extra = {"capturable": True, "foreach": True}
        params = list(self.online_network.parameters())
        if self.self_predictive is not None:
            params += [p for p in self.self_predictive.parameters() if p.requires_grad]
        return opt_cls(
            params,
            lr=lr,
            eps=float(self.cfg.adam_eps),
            weight_decay=float(self.cfg.weight_decay),
            **extra,
        )

    def current_lr(self) -> float:
        return self.lr_schedule(self.frames())

    def current_gamma(self) -> float:
        return self.gamma_schedule(self.frames())

    def _forwards(self):
        """(online, target, loss): the forward passes over this module's own networks and the
        loss function, made on first use (and again in a deep copy, whose networks are new
        objects)."""
        if self._forwards_of != id(self.online_network):
            mode = self.cfg.compile
            self._fwd = (
                *compiled_forwards(self.online_network, self.target_network, mode),
                compiled_loss(mode, self.cfg.compile_loss),
            )
            self._forwards_of = id(self.online_network)
        return self._fwd

    def compute_loss(self, batch: Mapping[str, torch.Tensor]) -> LossParts:
        """Loss, per-sample losses, the online quantiles and the loss's own figures for one
        collated batch."""
        taus, taus_next = self._draw_taus(batch["action"].shape[0])
        return self._loss(batch, taus, taus_next, self.targets_aside)

    def _draw_taus(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(online taus at s, target taus at s') for b samples, always in this order."""
        taus = stratified_symmetric_taus(b, self.n_train, device=self.device)
        return taus, self.target_taus(b, self.n_target, device=self.device)

    def _loss(
        self,
        batch: Mapping[str, torch.Tensor],
        taus: torch.Tensor,
        taus_next: torch.Tensor,
        target_aside: bool,
    ) -> LossParts:
        """compute_loss at given taus; target_aside runs the target's forward on the side
        thread while the online forward runs here."""
        state_img = batch.get("state_img")
        next_img = batch.get("next_state_img")
        online, target, loss_fn = self._forwards()
        next_inputs = (next_img, batch["next_state_float"], taus_next)
        pending = None
        if target_aside:  # the same values, the target's pass off the critical path
            pending = on_side_thread(target, *next_inputs, device_type=self.device.type)
        churn = self.churn
        if churn is None:
            z, features = online(state_img, batch["state_float"], taus)
        else:  # the reference rows (next states) in the same forward, at the midpoint taus
            b, r = taus.shape[0], churn.rows
            ref_img = None if next_img is None else next_img[:r]
            ref_float = batch["next_state_float"][:r]
            ref_taus = midpoint_taus(r, taus.shape[1], device=taus.device)
            z_all, f_all = online(
                None if state_img is None else torch.cat([state_img, ref_img]),
                torch.cat([batch["state_float"], ref_float]),
                torch.cat([taus, ref_taus]),
            )
            z, features = z_all[:b], f_all[:b]
            churn_loss, churn_raw = churn.loss(z_all[b:], ref_img, ref_float, ref_taus)
        with torch.no_grad():
            z_next, next_features = target(*next_inputs) if pending is None else pending.result()
            target_max = batch.get("target_max")
            stats = {}
            if target_max is not None:
                stats["train/bound_clipped"] = bound_clipped_share(z_next, target_max)
            z_online_next = None
            if self.cfg.double_dqn:
                z_online_next, _ = online(next_img, batch["next_state_float"], taus_next)
        loss, per_sample = loss_fn(
            z,
            taus,
            batch["action"],
            z_next,
            batch["reward"],
            batch["discount"],
            kappa=float(self.cfg.kappa),
            weights=batch.get("weights"),
            q_online_next=z_online_next,
            advantage_learning=float(self.cfg.advantage_learning),
            munchausen=self.munchausen,
            target_max=target_max,
            taus_next=taus_next,
            cvar=self.policy_cvar,
        )
        spr = self.self_predictive
        if spr is not None:
            predicted = spr.predict(features, batch["action"])
            aux, _ = self_predictive_loss(
                predicted, spr.target(next_features), batch["discount"] > 0
            )
            loss = loss + float(self.cfg.self_predictive_weight) * aux
            stats["train/self_predictive_loss"] = aux.detach()
        if churn is not None:
            stats["train/value_loss"] = loss.detach()
            stats["train/churn"] = churn_raw
            loss = loss + churn_loss
        return LossParts(loss, per_sample, z, stats)

    def _eager_cpu(self) -> bool:
        """Where learner.target_thread and learner.split_step apply: an eager learner on a
        CPU (a GPU's kernels already queue asynchronously; a compiled or captured step is one
        program)."""
        return self.device.type == "cpu" and self.cfg.compile == "none" and not self.cfg.cuda_graph

    @property
    def targets_aside(self) -> bool:
        """learner.target_thread where it applies: compute_loss runs the target's forward on
        the side thread."""
        return self.cfg.target_thread and self._eager_cpu()

    @property
    def splits_step(self) -> bool:
        """learner.split_step where it applies: the update's backward runs in split_backward."""
        return self.cfg.split_step and self._eager_cpu()

    def split_backward(self, batch: Mapping[str, torch.Tensor], opt) -> LossParts:
        """learner.split_step: each half of the batch through compute_loss and backward, the
        second on the side thread, at the taus the whole batch would draw; each half's loss
        weighted by its share, so that the summed gradients are the whole batch's. Returns
        the whole batch's figures (the loss, not yet checked: a non-finite one discards the
        gradients)."""
        b = int(batch["action"].shape[0])
        k = b // 2
        taus, taus_next = self._draw_taus(b)
        opt.zero_grad(set_to_none=True)

        def half(rows: slice) -> LossParts:
            part = {key: v[rows] for key, v in batch.items()}
            out = self._loss(part, taus[rows], taus_next[rows], target_aside=False)
            (out.loss * (part["action"].shape[0] / b)).backward()
            return out

        pending = on_side_thread(half, slice(k, b), device_type=self.device.type, grad=True)
        first = half(slice(0, k))
        second = pending.result()
        share = k / b  # figures of the whole batch: means of the halves, weighted

        def mean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return share * x.detach() + (1 - share) * y.detach()

        return LossParts(
            mean(first.loss, second.loss),
            torch.cat([first.per_sample, second.per_sample]),
            torch.cat([first.z.detach(), second.z.detach()]),
            {name: mean(v, second.stats[name]) for name, v in first.stats.items()},
        )

    def mirrored(self, batch: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """The batch with a `mirror_share` of its samples, drawn afresh, mirrored."""
        if self.mirror_share == 0:
            return batch
        mask = torch.rand(batch["action"].shape[0], device=self.device) < self.mirror_share
        return mirror_batch(batch, mask, self.mirror_perm, self.mirror_sign, self.mirror_action)

    @property
    def host_inputs(self) -> tuple[str, ...]:
        """The batch entries a training step may take from pinned host memory: the captured
        step's inputs (CapturedStep copies them straight into its static buffers, one copy
        instead of two), unless mirroring computes on them first. ReplayDataModule leaves
        these on the host when it moves a batch to a GPU."""
        return GRAPH_INPUTS if self.cfg.cuda_graph and self.mirror_share == 0 else ()

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int):
        batch = self.mirrored(batch)
        opt = self.optimizers()
        lr = self.current_lr()
        b = int(batch["action"].shape[0])
        self.samples_learned += b
        if self.cfg.cuda_graph:
            out = self._captured_update(batch, opt.optimizer, lr)
            count_manual_step(opt)
            loss, per_sample = out["train/loss"], out["per_sample"]
        else:
            for group in opt.param_groups:
                group["lr"] = lr
            out = self._eager_update(batch, opt)
            if out is None:  # a non-finite loss: the step was skipped
                self.log("train/nonfinite_skipped", float(self.guard.skipped))
                return None
            loss, per_sample = out["train/loss"], out["per_sample"]
        self._after_update(batch, per_sample, b)
        if not self._logs_this_step():  # last_stats (the progress bar) keeps the last written
            return loss.detach()  # step's: no device sync for a figure nobody reads
        if self.cfg.cuda_graph:  # the device counters of skipped steps, read when logged
            in_a_row, skipped = (int(v) for v in self._nonfinite.tolist())
            self.guard.observe(in_a_row, skipped)
        names = [k for k in out if k.startswith("train/")]  # one device sync for them all
        values = torch.stack([out[k].detach().float().reshape(()) for k in names]).tolist()
        stats = dict(zip(names, values))
        stats["train/lr"] = lr
        stats["train/gamma"] = self.current_gamma()
        stats["train/nonfinite_skipped"] = float(self.guard.skipped)
        self.last_stats = stats
        self.log_dict(stats, on_step=True, prog_bar=False, batch_size=b)
        return loss.detach()

    def _eager_update(self, batch: Mapping[str, torch.Tensor], opt) -> dict | None:
        """One step through Lightning (its precision plugin scales fp16 losses); None when
        the loss is not finite (the step is skipped, NonFiniteGuard counts it)."""
        if self.splits_step:  # backward done, on two threads
            loss, per_sample, z, stats = self.split_backward(batch, opt)
            if not self.guard.check(loss):
                opt.zero_grad(set_to_none=True)
                return None
        else:
            loss, per_sample, z, stats = self.compute_loss(batch)
            if not self.guard.check(loss):
                return None
            opt.zero_grad(set_to_none=True)
            self.manual_backward(loss)
        # Lightning's clip unscales fp16 gradients first (mixed precision on GPU)
        self.clip_gradients(
            opt, gradient_clip_val=float(self.cfg.grad_clip_norm), gradient_clip_algorithm="norm"
        )
        if self.churn is not None:  # the weights this step changes: the next churn's origin
            self.churn.remember(self.online_network)
        opt.step()
        out = {"train/loss": loss.detach(), "per_sample": per_sample}
        if self._logs_this_step():
            out |= q_stats(z) | stats
            out["train/grad_norm_clipped"] = self._grad_norm()
        return out

    def _grad_norm(self) -> torch.Tensor:
        grads = [p.grad for p in self.online_network.parameters() if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

    def device_update(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One whole optimisation step without a host synchronisation, so that CapturedStep
        can record it: loss, backward, clipping and the optimizer's step. A non-finite loss
        zeroes the gradients (the optimizer takes a zero-gradient step: its moments decay)
        and is counted on the device ([in a row, in total]). Returns device tensors."""
        opt = self._raw_optimizer
        params = [p for g in opt.param_groups for p in g["params"]]
        if self._nonfinite is None:
            self._nonfinite = torch.zeros(2, dtype=torch.int64, device=params[0].device)
        loss, per_sample, z, stats = self.compute_loss(batch)
        bad = ~torch.isfinite(loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.compile_optimizer:
            grad_norm = self._fused_optimizer_step(opt, bad)
        else:
            grads = [p.grad for p in params if p.grad is not None]
            for g in grads:
                g.masked_fill_(bad, 0.0)
            torch.nn.utils.clip_grad_norm_(params, float(self.cfg.grad_clip_norm))
            grad_norm = self._grad_norm()
            opt.step()
        self._nonfinite[0].add_(1).mul_(bad)  # a finite step ends the run of bad ones
        self._nonfinite[1].add_(bad)
        out = {"train/loss": loss.detach().float(), "per_sample": per_sample.float()}
        out |= q_stats(z) | stats
        out["train/grad_norm_clipped"] = grad_norm
        return out

    def _fused_optimizer_step(self, opt: torch.optim.Optimizer, bad: torch.Tensor) -> torch.Tensor:
        """Clipping and the (R)Adam step as training/adam_step's one function, compiled on a
        GPU (a few fused kernels in the captured step); the clipped gradients' norm."""
        if self._adam_step is None:
            fn = clipped_adam_step_
            self._adam_step = torch.compile(fn) if self.device.type == "cuda" else fn
        group = opt.param_groups[0]
        params, exp_avgs, exp_avg_sqs, steps = adam_state(opt)
        beta1, beta2 = group["betas"]
        return self._adam_step(
            params,
            [p.grad for p in params],
            exp_avgs,
            exp_avg_sqs,
            steps,
            lr=group["lr"],
            beta1=float(beta1),
            beta2=float(beta2),
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            max_norm=float(self.cfg.grad_clip_norm),
            rectify=self.cfg.optimizer == "radam",
            skip=bad,
        )

    def _captured_update(self, batch: Mapping[str, torch.Tensor], opt, lr: float) -> dict:
        """device_update through a CapturedStep (made at the first step, under the autocast
        Lightning's precision set up); the lr is written into the optimizer's lr tensor."""
        for group in opt.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        if self.captured is None:
            if self.device.type == "cuda":  # e.g. resumed from an eager run's optimizer state
                make_capturable(opt, self.device, lr)
            self._raw_optimizer = opt
            dtype = None
            if torch.is_autocast_enabled(self.device.type):
                dtype = torch.get_autocast_dtype(self.device.type)
            if dtype == torch.float16:
                raise ConfigError(
                    "learner.cuda_graph",
                    "needs trainer.precision 32-true or bf16-mixed (fp16 loss scaling "
                    "synchronises the host every step)",
                )
            self.captured = CapturedStep(
                self.device_update, GRAPH_INPUTS, autocast_dtype=dtype, device=self.device
            )
        return self.captured(batch)

    def _after_update(self, batch: Mapping[str, torch.Tensor], per_sample, b: int) -> None:
        """Priorities, target and acting-average updates, and publishing, after a step."""
        if self.on_priorities is not None and "indices" in batch:
            self.on_priorities(batch["indices"], per_sample.clone())
        self.samples_since_target_update += b
        every = int(self.cfg.target_update_every_transitions)
        while self.samples_since_target_update >= every:
            soft_update(self.target_network, self.online_network, float(self.cfg.target_tau))
            if self.self_predictive is not None:
                head = self.self_predictive
                soft_update(head.target_projection, head.projection, float(self.cfg.target_tau))
            self.samples_since_target_update -= every
        every = int(self.cfg.reset_every_frames)
        if every > 0:  # off by default: no frame read on the hot path
            slot = reset_slot(
                self.frames(), every, int(self.cfg.reset_until_frames), self.reset_slot
            )
            if slot is not None:
                self.reset_online()
                self.reset_slot = slot
        if self.acting_network is not None:
            soft_update(
                self.acting_network,
                self.online_network,
                ema_rate(self.acting_updates, self.ema_batches),
            )
            self.acting_updates += 1
        if (
            self.publish is not None
            and (self.global_step + 1) % int(self.cfg.publish_every_batches) == 0
        ):
            self.publish(self.acting)

    def reset_online(self) -> None:
        """Shrink-and-perturb the online network towards a fresh initialisation and zero
        the optimizer's moments (agent/resets.py). The target network is left as it is."""
        fresh = copy.deepcopy(self.online_network)
        fresh.init_weights()
        shrink_perturb_(
            self.online_network, fresh, float(self.cfg.reset_shrink), self.cfg.reset_modules
        )
        opt = self.optimizers()
        reset_optimizer_state_(getattr(opt, "optimizer", opt))
        if self.churn is not None:  # a reset is meant to move every value: no pull back
            self.churn.forget()
        self.resets_done += 1
        self.log("train/resets", float(self.resets_done), on_step=True, batch_size=1)

    def _logs_this_step(self) -> bool:
        """Will Lightning write this step's metrics? It does every log_every_n_steps batches;
        logging the step statistics on the others cost 5% of a CPU learner's time (py-spy)."""
        connector = getattr(self._trainer, "_logger_connector", None)
        return True if connector is None else bool(connector.should_update_logs)

    @property
    def acting(self) -> torch.nn.Module:
        """The weights that drive the collectors' races (and best.pt / agent.pt)."""
        return self.online_network if self.acting_network is None else self.acting_network

    # --- checkpoints --------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["learner_counters"] = {
            "acting_updates": int(self.acting_updates),
            "samples_learned": int(self.samples_learned),
            "samples_since_target_update": int(self.samples_since_target_update),
            "nonfinite_skipped": int(self.guard.skipped),
            "resets_done": int(self.resets_done),
            "reset_slot": int(self.reset_slot),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        c = checkpoint.get("learner_counters", {})
        self.acting_updates = int(c.get("acting_updates", 0))
        state = checkpoint.get("state_dict", {})
        if self.acting_network is not None and not any(k.startswith("acting_") for k in state):
            for k, v in list(state.items()):  # a checkpoint without an acting average
                if k.startswith("online_network."):
                    state["acting_network." + k[len("online_network.") :]] = v.clone()
        elif self.acting_network is None:
            for k in [k for k in state if k.startswith("acting_network.")]:
                del state[k]
        self.samples_learned = int(c.get("samples_learned", 0))
        self.samples_since_target_update = int(c.get("samples_since_target_update", 0))
        self.guard.skipped = int(c.get("nonfinite_skipped", 0))
        self.resets_done = int(c.get("resets_done", 0))
        self.reset_slot = int(c.get("reset_slot", 0))

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int):
        loss = self.compute_loss(batch).loss
        self.log("val/loss", float(loss), on_epoch=True, batch_size=int(batch["action"].shape[0]))
        return loss
