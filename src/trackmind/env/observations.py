"""ObservationManager and its term types: ObservationTerm, VectorlikeTerm, GroupedObservationTerm.

Every term returns a batch (B, *native_shape) for all cars at once. A term knows how to
flatten itself and rebuild its native shape, which is what lets the manager offer both a
Dict space (one key per top-level term) and a Box space (all terms flattened and stacked),
and lets SpaceTransformer convert between the two outside the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from trackmind.env.manager import Manager, ManagerTerm, as_dict, build_term
from trackmind.env.mirror import FloatMirror, concatenated
from trackmind.env.spaces import SpaceTransformer
from trackmind.errors import ConfigError, check_schema, require

# The observation key of the network's float inputs. Not `float`: that is an attribute of
# torch.nn.Module, and SB3's MultiInputPolicy keys an nn.ModuleDict by observation keys.
FLOATS = "floats"


class ObservationTerm(ManagerTerm):
    """A piece of the observation: `_get_obs` computes it, `_normalize` optionally rescales."""

    dtype: np.dtype = np.dtype(np.float32)
    normalize: bool = False

    def get_obs(self, raw: Any) -> tuple[np.ndarray, dict]:
        obs, info = self._get_obs(raw)
        if self.normalize:
            obs = self._normalize(obs)
        return obs, info

    def _get_obs(self, raw: Any) -> tuple[np.ndarray, dict]:
        raise NotImplementedError

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        return obs

    def get_native_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def get_flatten_dim(self) -> int:
        return int(np.prod(self.get_native_shape()))

    def flatten(self, obs: np.ndarray) -> np.ndarray:
        """(native shape) -> (flatten_dim,), or (B, native) -> (B, flatten_dim)."""
        if obs.shape == self.get_native_shape():
            return obs.reshape(-1)
        return obs.reshape(obs.shape[0], -1)

    def space(self) -> gym.spaces.Box:
        """Space of one car's observation of this term."""
        return gym.spaces.Box(-np.inf, np.inf, self.get_native_shape(), self.dtype)


class VectorlikeTerm(ObservationTerm):
    """A term whose native shape is (size,). Fixed mean/std give its normalisation.

    Subclasses set `size` and implement `_vector(raw) -> (B, size)`; `mean` and `std`
    (arrays of `size`) describe typical values, used both by `normalize` here and by the
    network's internal float normalisation.
    """

    size = 1

    def __init__(self, normalize: bool = False) -> None:
        super().__init__()
        self.normalize = bool(normalize)

    def _get_obs(self, raw: Any) -> tuple[np.ndarray, dict]:
        return np.asarray(self._vector(raw), dtype=np.float32), {}

    def _vector(self, raw: Any) -> np.ndarray:
        raise NotImplementedError

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        return ((obs - self.mean) / self.std).astype(np.float32)

    def get_native_shape(self) -> tuple[int, ...]:
        return (self.size,)

    @property
    def mean(self) -> np.ndarray:
        return np.zeros(self.size, np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.ones(self.size, np.float32)

    def mirror(self) -> FloatMirror | None:
        """How this term's vector mirrors left to right (env/mirror.py); None: unknown, so a
        learner that mirrors its batches, or a race with the mirror, refuses the term rather
        than guess."""
        return None

    def feature_names(self) -> list[str]:
        if self.size == 1:
            return [self.name]
        return [f"{self.name}[{i}]" for i in range(self.size)]


class GroupedObservationTerm(VectorlikeTerm):
    """Concatenation of VectorlikeTerms, e.g. all car metadata that one encoder reads."""

    def __init__(self, terms: list[VectorlikeTerm], normalize: bool = False) -> None:
        super().__init__(normalize=normalize)
        self.terms = terms
        self.size = sum(t.size for t in terms)

    def bind(self, env: Any) -> None:
        super().bind(env)
        for t in self.terms:
            t.bind(env)

    def reset(self, cars: np.ndarray) -> None:
        for t in self.terms:
            t.reset(cars)

    def _vector(self, raw: Any) -> np.ndarray:
        return np.concatenate([t._get_obs(raw)[0] for t in self.terms], axis=1)

    @property
    def mean(self) -> np.ndarray:
        return np.concatenate([t.mean for t in self.terms]).astype(np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.concatenate([t.std for t in self.terms]).astype(np.float32)

    def layout(self) -> dict[str, slice]:
        """Where each member term lies in the group's vector."""
        out, i = {}, 0
        for t in self.terms:
            out[t.name] = slice(i, i + t.size)
            i += t.size
        return out

    def mirror(self) -> FloatMirror | None:
        parts = [t.mirror() for t in self.terms]
        return None if any(p is None for p in parts) else concatenated(parts)

    def unmirrored(self) -> list[str]:
        """Member terms that do not say how they mirror."""
        return [t.name for t in self.terms if t.mirror() is None]

    def feature_names(self) -> list[str]:
        return [n for t in self.terms for n in t.feature_names()]


class ObservationManager(Manager):
    """Collects the terms' observations into a dict (one key per term) or a flat box."""

    def __init__(self, terms: list[ObservationTerm], space: str = "dict") -> None:
        super().__init__(terms)
        if space not in ("dict", "box"):
            raise ValueError(f"space must be 'dict' or 'box', got {space!r}")
        self.space_type = space
        self.dict_space: gym.spaces.Dict | None = None
        self.transformer: SpaceTransformer | None = None

    def bind(self, env: Any) -> None:
        """Bind the terms, then build the spaces (some shapes come from the environment)."""
        super().bind(env)
        self.dict_space = gym.spaces.Dict({t.name: t.space() for t in self.terms})
        self.transformer = SpaceTransformer(self.dict_space)

    @property
    def observation_space(self) -> gym.spaces.Space:
        """Space of one car's observation."""
        if self.space_type == "dict":
            return self.dict_space
        return self.transformer.box_space

    def compute(self, raw: Any) -> tuple[dict[str, np.ndarray] | np.ndarray, dict]:
        """Batched observation of every car: dict of (B, ...) or a (B, D) box."""
        obs, info = {}, {}
        for t in self.terms:
            obs[t.name], term_info = t.get_obs(raw)
            info.update(term_info)
        if self.space_type == "box":
            return self.transformer.dict_to_numpy_vectorized(obs), info
        return obs, info

    def float_stats(self, key: str = FLOATS) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) of a vector-like term, for the network's internal normalisation."""
        t = self.term(key)
        if not isinstance(t, VectorlikeTerm):
            raise KeyError(f"observation term {key!r} is not vector-like")
        return t.mean, t.std

    def float_mirror(self, key: str = FLOATS) -> FloatMirror:
        """The mirror of a vector-like term; ConfigError naming the members that have none.
        With a term normalised in the environment, a flipped feature must have mean 0 and a
        swapped pair one mean and std, or the mirror of the stored value would be wrong."""
        t = self.term(key)
        where = f"env.observation.terms.{key}"
        m = t.mirror() if isinstance(t, VectorlikeTerm) else None
        if m is None:
            missing = t.unmirrored() if isinstance(t, GroupedObservationTerm) else [t.name]
            raise ConfigError(
                where,
                f"the mirror (learner.mirror_share, --mirror) needs terms that say how they "
                f"mirror; {missing} do not",
            )
        if t.normalize:
            mean, std = t.mean, t.std
            ok = np.allclose(mean[m.perm] * m.sign, mean) and np.allclose(std[m.perm], std)
            require(ok, where, "normalised in the environment, its stats do not mirror")
        return m


@dataclass
class ObservationConfig:
    """``env.observation``: `space` (dict: one key per term, box: one flat vector) and
    `terms`, each a TermSpec or a `group` of vector-like terms (GroupSpec)."""

    space: str = "dict"
    terms: Any = None

    def __post_init__(self) -> None:
        sp = self.space
        require(sp in ("dict", "box"), "space", f"must be 'dict' or 'box', got {sp!r}")


@dataclass
class GroupSpec:
    """A term made of vector-like terms concatenated (the `floats` group)."""

    group: Any = None
    normalize: bool = False


def build_observation_manager(cfg: Mapping | Any, key: str = "env.observation"):
    """ObservationManager from config: `space` and `terms` (a term may be a `group`, whose
    members set to null are left out)."""
    oc = check_schema(cfg, ObservationConfig, key)
    terms_cfg = as_dict(oc.terms, f"{key}.terms")
    if not terms_cfg:
        raise ConfigError(f"{key}.terms", "at least one observation term is needed")
    terms = []
    for name, spec in terms_cfg.items():
        tkey = f"{key}.terms.{name}"
        spec = as_dict(spec, tkey)
        if "group" not in spec:
            t, _ = build_term("observation", name, spec, tkey)
            terms.append(t)
            continue
        gs = check_schema(spec, GroupSpec, tkey)
        members = []
        for mname, mspec in as_dict(gs.group, f"{tkey}.group").items():
            if mspec is None:  # null leaves a member out: a run without that input
                continue
            m, _ = build_term("observation", mname, mspec, f"{tkey}.group.{mname}")
            if not isinstance(m, VectorlikeTerm):
                raise ConfigError(f"{tkey}.group.{mname}", "only vector-like terms group")
            members.append(m)
        if not members:
            raise ConfigError(f"{tkey}.group", "a group needs at least one term")
        g = GroupedObservationTerm(members, normalize=gs.normalize)
        g.name = name
        terms.append(g)
    return ObservationManager(terms, space=oc.space)
