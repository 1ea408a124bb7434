"""learner.cuda_graph: the update a CUDA graph records, checked on the CPU.

On a CPU CapturedStep runs IQNLightningModule.device_update eagerly, the very function the
graph records on a GPU. It must take the same step as the eager learner (loss, clipping,
RAdam), keep its figures on the device, and turn a non-finite loss into a zero-gradient
step counted on the device, which NonFiniteGuard reads at logged steps.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from trackmind.agent.loss import NonFiniteGuard
from trackmind.agent.network_config import build_network
from trackmind.errors import ConfigError
from trackmind.training.captured_step import CapturedStep
from trackmind.training.module import GRAPH_INPUTS, IQNLightningModule, soft_update

ROOT = Path(__file__).resolve().parents[1]
FLOATS = 184


def _module(**change) -> IQNLightningModule:
    torch.manual_seed(0)
    raw = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "network" / "iqn_floats.yaml"))
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "learner" / "iqn.yaml"))
    return IQNLightningModule(build_network(raw, FLOATS, None), {**cfg, **change})


def _batch(b: int = 16, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "state_float": torch.randn(b, FLOATS, generator=g),
        "next_state_float": torch.randn(b, FLOATS, generator=g),
        "action": torch.randint(0, 12, (b,), generator=g),
        "reward": torch.randn(b, generator=g),
        "discount": torch.full((b,), 0.99),
        "weights": torch.ones(b),
        "indices": torch.arange(b),  # not a graph input: left out of the captured step
    }


def _plain_step(module: IQNLightningModule, opt, batch: dict) -> torch.Tensor:
    """The eager learner's update written out: loss, backward, clip, step."""
    loss = module.compute_loss(batch).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.online_network.parameters(), module.cfg.grad_clip_norm)
    opt.step()
    return loss.detach()


def _params(module: IQNLightningModule) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.online_network.parameters()]


@pytest.mark.parametrize("compile_optimizer", [False, True])
def test_device_update_takes_the_eager_step(compile_optimizer: bool):
    eager, graphed = _module(), _module(cuda_graph=True, compile_optimizer=compile_optimizer)
    opt_e, opt_g = eager.configure_optimizers(), graphed.configure_optimizers()
    graphed._raw_optimizer = opt_g
    step = CapturedStep(graphed.device_update, GRAPH_INPUTS)
    for i in range(3):
        batch = _batch(seed=i)
        torch.manual_seed(10 + i)
        loss_e = _plain_step(eager, opt_e, batch)
        torch.manual_seed(10 + i)
        out = step(batch)
        assert torch.equal(out["train/loss"], loss_e)
        for a, b in zip(_params(eager), _params(graphed)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert set(out) >= {"per_sample", "train/q_mean", "train/action_gap", "train/grad_norm_clipped"}
    assert all(isinstance(v, torch.Tensor) for v in out.values())  # nothing read back yet
    assert graphed._nonfinite.tolist() == [0, 0]
    assert not step.captured  # a CPU never captures


def test_the_value_bounds_share_reaches_the_steps_figures():
    # train/bound_clipped is the share of the target's quantiles at s' above target_max: all
    # of them under a bound far below any value, none under one far above, and no figure at
    # all for a batch without a bound
    module = _module(cuda_graph=True)
    module._raw_optimizer = module.configure_optimizers()
    for bound, share in ((-1.0e9, 1.0), (1.0e9, 0.0)):
        batch = _batch() | {"target_max": torch.full((16,), bound)}
        assert float(module.device_update(batch)["train/bound_clipped"]) == share
    assert "train/bound_clipped" not in module.device_update(_batch())
    # a bound between the values: the figure is the share of the target network's own
    # output above it, counted here value by value from what its forward returned
    seen = []
    online, target, loss_fn = module._forwards()

    def spy(img, floats, taus):
        z, features = target(img, floats, taus)
        seen.append(z)
        return z, features

    module._fwd = (online, spy, loss_fn)
    torch.manual_seed(5)
    module.compute_loss(_batch())
    bound = float(seen[0].median())  # between the target's values: some above, some not
    torch.manual_seed(5)
    parts = module.compute_loss(_batch() | {"target_max": torch.full((16,), bound)})
    z_next = seen[1]
    assert torch.equal(z_next, seen[0])  # the same taus: the same quantiles
    want = sum(float(v > bound) for v in z_next.flatten()) / z_next.numel()
    assert 0 < want < 1
    assert float(parts.stats["train/bound_clipped"]) == pytest.approx(want)


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_the_value_bounds_share_is_logged_by_both_learners(cuda_graph, tmp_path):
    """The figure reaches the logged metrics (last_stats, what Lightning was handed) through
    Lightning's own loop, eager (learner.cuda_graph=false, the CPU default) or captured: a
    bound far below every value clips all of the target's quantiles. Both count their steps
    (max_steps ends the fit)."""
    import lightning as L

    module = _module(cuda_graph=cuda_graph, publish_every_batches=1000)
    module.frames = lambda: 0
    b = 16
    batches = [_batch(b, seed) | {"target_max": torch.full((b,), -1.0e9)} for seed in (1, 2)]
    trainer = L.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, None))
    # Lightning counted both steps: the captured one steps the raw optimizer, and a run
    # that did not count it would never publish its weights nor stop at max_steps
    assert trainer.global_step == 2 and module.samples_learned == 2 * b
    assert module.last_stats["train/bound_clipped"] == 1.0
    assert {"train/loss", "train/q_mean", "train/grad_norm_clipped"} <= set(module.last_stats)


@pytest.mark.parametrize("compile_optimizer", [False, True])
def test_a_non_finite_loss_is_a_zero_gradient_step_counted_on_the_device(compile_optimizer):
    module = _module(cuda_graph=True, compile_optimizer=compile_optimizer)
    module._raw_optimizer = module.configure_optimizers()
    step = CapturedStep(module.device_update, GRAPH_INPUTS)
    step(_batch(seed=0))
    bad = _batch(seed=1)
    bad["reward"][3] = float("nan")
    before = _params(module)
    out = step(bad)
    assert torch.isnan(out["train/loss"])
    assert all(torch.isfinite(p).all() for p in _params(module))
    if not compile_optimizer:  # the fused step reads the NaN gradients as zeros instead
        grads = [p.grad for p in module.online_network.parameters()]
        assert all(g is not None and not g.any() for g in grads)
    assert float(out["train/grad_norm_clipped"]) == 0.0
    # a zero gradient still moves the weights by the decaying first moment, never to NaN
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(module)))
    step(bad)
    assert module._nonfinite.tolist() == [2, 2]
    step(_batch(seed=2))
    assert module._nonfinite.tolist() == [0, 2]  # a finite step ends the run


def test_guard_reads_device_counts_and_stops_after_too_many_in_a_row():
    guard = NonFiniteGuard(3)
    guard.observe(2, 5)
    assert (guard.in_a_row, guard.skipped) == (2, 5)
    with pytest.raises(FloatingPointError, match="3 steps in a row"):
        guard.observe(3, 6)


def test_soft_update_is_lerp_value_by_value():
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        a.weight.copy_(torch.tensor([[1.0, 2.0]]))
        a.bias.fill_(0.0)
        b.weight.copy_(torch.tensor([[3.0, -2.0]]))
        b.bias.fill_(10.0)
    soft_update(a, b, 0.25)  # 0.75 * a + 0.25 * b
    assert a.weight.tolist() == [[1.5, 1.0]]
    assert a.bias.tolist() == [2.5]


def test_the_module_names_its_host_inputs_only_for_a_captured_step_without_mirroring():
    assert _module(cuda_graph=True).host_inputs == GRAPH_INPUTS
    assert _module(cuda_graph=False).host_inputs == ()
    mirrored = _module(cuda_graph=True)
    mirrored.mirror_share = 0.5  # mirroring computes on the batch before the step
    assert mirrored.host_inputs == ()


@pytest.mark.parametrize(
    ("host_inputs", "training", "device", "stays"),
    [
        (GRAPH_INPUTS, True, "cuda", {"state_float", "next_state_float", "action", "reward"}),
        ((), True, "cuda", set()),  # the eager learner reads device tensors
        (GRAPH_INPUTS, False, "cuda", set()),  # validation batches go through compute_loss
        (GRAPH_INPUTS, True, "cpu", set()),
    ],
)
def test_pinned_host_inputs_skip_lightnings_move(monkeypatch, host_inputs, training, device, stays):
    """A training batch for a captured step on a GPU leaves its pinned graph inputs on the
    host (CapturedStep copies them into its buffers); the rest moves as Lightning moves it."""
    import types

    import lightning as L

    from trackmind.training.datamodule import ReplayDataModule

    dm = ReplayDataModule.__new__(ReplayDataModule)  # the hook reads these two fields only
    dm.host_inputs, dm.trainer = host_inputs, types.SimpleNamespace(training=training)
    moved: set[str] = set()

    def move(self, batch, device, dataloader_idx):  # Lightning's move, recorded
        moved.update(batch)
        return batch

    monkeypatch.setattr(L.LightningDataModule, "transfer_batch_to_device", move)
    batch = _batch()
    pinned = [batch[k] for k in ("state_float", "next_state_float", "action", "reward", "indices")]
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda t: any(t is v for v in pinned))
    out = dm.transfer_batch_to_device(batch, torch.device(device), 0)
    assert set(out) == set(batch) and all(out[k] is batch[k] for k in batch)
    assert moved == set(batch) - stays  # weights are not pinned, indices not a graph input


def test_captured_step_moves_host_inputs_for_its_eager_steps():
    """Before capture (and on a CPU) the update reads the inputs on the step's device."""
    seen = []
    step = CapturedStep(lambda b: seen.append({k: v.device for k, v in b.items()}) or {}, ("x",))
    step({"x": torch.ones(2), "y": torch.zeros(1)})
    assert seen == [{"x": torch.device("cpu")}]  # only its keys, on its device
    assert CapturedStep(lambda b: {}, ("x",), device="cpu").device == torch.device("cpu")


def test_captured_step_needs_a_warmup():
    with pytest.raises(ValueError, match="warm-up"):
        CapturedStep(lambda b: {}, ("x",), warmup=0)


def test_fp16_autocast_is_refused_with_the_key():

    module = _module(cuda_graph=True)

    class _Opt:
        param_groups: list = []

    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(ConfigError, match="cuda_graph"):
        module._captured_update(_batch(), _Opt(), 1e-3)


@pytest.mark.parametrize(
    "accelerator, precision, cuda, error",
    [
        ("gpu", "bf16-mixed", True, None),
        ("gpu", "32-true", True, None),
        ("auto", "bf16-mixed", True, None),
        ("gpu", "16-mixed", True, "32-true or bf16-mixed"),
        ("cpu", "32-true", True, "a CUDA GPU learner"),
        ("gpu", "bf16-mixed", False, "a CUDA GPU learner"),
    ],
)
def test_cuda_graph_needs_a_cuda_learner_in_fp32_or_bf16(accelerator, precision, cuda, error):
    from trackmind.training.module import check_cuda_graph, learner_config

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "learner" / "iqn.yaml"))
    check_cuda_graph(learner_config(cfg), "cpu", "16-mixed", False)  # off: anything goes
    on = learner_config({**cfg, "cuda_graph": True})
    if error is None:
        check_cuda_graph(on, accelerator, precision, cuda)
    else:
        with pytest.raises(ConfigError, match=f"^learner.cuda_graph: .*{error}"):
            check_cuda_graph(on, accelerator, precision, cuda)


def test_gpu_check_without_cuda_says_so_in_one_line():
    import subprocess
    import sys

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py")], capture_output=True, text=True
    )
    assert r.returncode == 2
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no CUDA device here")
    assert r.stderr == ""


def test_docs_gpu_tables_are_generated_from_their_result_files():
    """docs/gpu.md's tables are gpu_check.py --report of the saved results, never hand-kept."""
    import subprocess
    import sys

    page = (ROOT / "docs" / "gpu.md").read_text()
    blocks = [
        part.split("<!-- gpu-check table: end -->")[0]
        for part in page.split("<!-- gpu-check table: begin -->")[1:]
    ]
    # the fourth H200 lease's two calls (Impala's learner rows and the default run; Impala's
    # run), the third lease's two checks (the lock fix; the batch copied once), the second
    # lease's three calls (fused optimizer; one thread; fused heads, learner rows alone), then
    # the first lease's check and its two real runs after the frozen-copy fix
    assert len(blocks) == 10
    reports = []
    for block in blocks:
        named = re.search(r"gpu_check\.py --report (\S+): do not edit", block)
        assert named is not None, "each gpu-check block names the result folder it came from"
        results = ROOT / named.group(1)
        assert results.is_dir()
        r = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--report", str(results)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert r.stdout.strip() in block
        reports.append(r.stdout)
    # figures of the H200 leases, as measured (docs/results/gpu/2026-1[12]-*-h200*)
    assert "| 71.4 batches/s | >= 400 | missed |" in reports[0]  # iqn_impala's step
    assert "| real run: learner batches/s | 225.9 | >= 250 | missed |" in reports[0]
    assert "wall / its CPU / replay lock wait | 4.07 / 2.14 / 0.56 |" in reports[0]
    assert "| real run: overrides | network=iqn_impala |" in reports[1]
    assert "| real run: learner batches/s | 60.0 | >= 250 | missed |" in reports[1]
    assert "| 395.6 batches/s | >= 400 | missed |" in reports[2]
    assert "| real run: learner batches/s | 254.3 | >= 250 | met |" in reports[2]
    assert "wall / its CPU / replay lock wait | 3.55 / 2.12 / 0.27 |" in reports[2]
    assert (
        "apart: step 2.49 ms" in reports[3] and "| 401.5 batches/s | >= 400 | met |" in reports[3]
    )
    assert "compiled forwards and optimizer (default)" in reports[4]
    assert "| 379.1 batches/s | >= 400 | missed |" in reports[4]
    assert "| real run: learner batches/s | 272.8 | >= 250 | met |" in reports[5]
    assert "wall / its CPU / replay lock wait | 3.14 / 1.68 / 0.49 |" in reports[5]
    assert "| 395.9 batches/s | >= 400 | missed |" in reports[6]
    assert "real run" not in reports[6]  # a call without its real run: no rows for it
    assert "| real run: learner_wait_share | 0.664 | < 0.1 | missed |" in reports[7]
    assert "| real run: learner_wait_share | 0.001 | < 0.1 | met |" in reports[8]
    assert "| real run: learner batches/s | 191.6 | >= 250 | missed |" in reports[9]
    assert "prefetch thread" not in reports[9]  # a run from before the figures: no row


def test_with_tables_fills_the_block_of_a_folder_and_keeps_the_others(tmp_path):
    """--report DIR --docs PAGE writes the block naming DIR, else the first naming none, and
    remakes every other block from its own folder; a page with no free block is refused."""
    import gpu_check

    one, two = tmp_path / "one", tmp_path / "two"
    for folder, util in ((one, 11.0), (two, 22.0)):
        folder.mkdir()
        (folder / "gpu.json").write_text(json.dumps({"device": "card", "gpu_util": util}))
    begin, end = gpu_check.BEGIN, gpu_check.END
    page = f"top\n{begin}\n{end}\nmiddle\n{begin}\n{end}\nfoot\n"
    page = gpu_check.with_tables(page, one, "TABLE ONE")
    assert f"--report {one}: do not edit -->\n\nTABLE ONE\n\n{end}\nmiddle" in page
    page = gpu_check.with_tables(page, two, "TABLE TWO")
    # the first block is remade from its folder's files, the second holds the text given
    assert "TABLE ONE" not in page and "| 11 | >= 60 | missed |" in page
    assert page.endswith(f"TABLE TWO\n\n{end}\nfoot\n") and page.startswith("top\n")
    assert gpu_check.with_tables(page).count("| 22 | >= 60 | missed |") == 1
    with pytest.raises(SystemExit, match="no block for"):
        gpu_check.with_tables(page, tmp_path / "three", "TABLE THREE")


def test_make_capturable_turns_an_eager_state_into_a_capturable_one():
    from trackmind.training.module import make_capturable

    module = _module()
    opt = module.configure_optimizers()  # eager: float lr, not capturable
    _plain_step(module, opt, _batch())
    cpu = torch.device("cpu")  # the device a GPU run passes; the CPU checks the wiring
    make_capturable(opt, cpu, 2e-4)
    group = opt.param_groups[0]
    assert group["capturable"] and group["foreach"]
    assert isinstance(group["lr"], torch.Tensor) and float(group["lr"]) == pytest.approx(2e-4)
    steps = [opt.state[p]["step"] for p in group["params"]]
    assert all(s.dtype == torch.float32 and float(s) == 1.0 for s in steps)


def test_compile_optimizer_needs_the_captured_step():
    with pytest.raises(ConfigError, match=r"learner\.compile_optimizer: .*cuda_graph=true"):
        _module(compile_optimizer=True)
