"""training/adam_step: clipping and (R)Adam as one function, value by value.

Hand-computed coefficients and first steps, then many steps against torch's own optimizers
and clip_grad_norm_ in float64 (equal to rounding), and a skipped step as a zero gradient.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from trackmind.training.adam_step import (
    adam_coefficients,
    adam_state,
    clip_coefficient,
    clipped_adam_step_,
)

B1, B2 = 0.9, 0.999


def _paper_radam(t: int, lr: float) -> tuple[float, float, float]:
    """RAdam's (num, root_scale, plain) from the paper's formulas, in plain floats."""
    bc1, bc2 = 1 - B1**t, 1 - B2**t
    rho_inf = 2 / (1 - B2) - 1
    rho = rho_inf - 2 * t * B2**t / bc2
    if rho <= 5:
        return 0.0, 1.0, lr / bc1
    r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
    return lr * r * math.sqrt(bc2) / bc1, 1.0, 0.0


def test_adam_coefficients_by_hand():
    num, root, plain = adam_coefficients(torch.tensor([1.0, 2.0]), 0.1, B1, B2, rectify=False)
    # t=1: bc1 = 0.1, bc2 = 0.001; t=2: bc1 = 0.19, bc2 = 0.001999
    assert num.tolist() == pytest.approx([1.0, 0.1 / 0.19], rel=1e-12)
    assert root.tolist() == pytest.approx([1 / math.sqrt(0.001), 1 / math.sqrt(0.001999)])
    assert plain.tolist() == [0.0, 0.0]


def test_radam_is_unrectified_through_step_5_then_rectified():
    # rho_1 = 1999 - 2 * 0.999 / 0.001 = 1; rho_5 = 4.99; rho_6 = 5.97
    steps = torch.arange(1.0, 9.0)
    num, root, plain = adam_coefficients(steps, 0.01, B1, B2, rectify=True)
    assert num[:5].tolist() == [0.0] * 5 and num[5:].gt(0).all()
    assert plain[:5].tolist() == pytest.approx([0.01 / (1 - B1**t) for t in range(1, 6)])
    assert plain[5:].tolist() == [0.0] * 3
    for t in range(1, 9):
        want = _paper_radam(t, 0.01)
        got = (num[t - 1].item(), root[t - 1].item(), plain[t - 1].item())
        assert got == pytest.approx(want, rel=1e-9)


def test_clip_coefficient_by_hand():
    no = torch.tensor(False)
    assert clip_coefficient(torch.tensor(5.0), 1.0, no).item() == pytest.approx(1 / (5 + 1e-6))
    assert clip_coefficient(torch.tensor(0.5), 1.0, no).item() == 1.0  # never scales up
    assert clip_coefficient(torch.tensor(float("nan")), 1.0, torch.tensor(True)).item() == 0.0


def _step(params, grads, state, fn=clipped_adam_step_, **change) -> torch.Tensor:
    """One clipped step of ``fn`` on ``state`` (m, v, steps): lr 0.1, eps 1e-8, no decay,
    clipped to 1, Adam, not skipped, unless ``change`` says otherwise."""
    kw = {"lr": 0.1, "beta1": B1, "beta2": B2, "eps": 1e-8, "weight_decay": 0.0}
    kw |= {"max_norm": 1.0, "rectify": False, "skip": torch.tensor(False)} | change
    return fn(params, grads, *state, **kw)


def _state(params: list[torch.Tensor]) -> tuple:
    opt = torch.optim.Adam(params)
    return opt, *adam_state(opt)


def test_first_adam_step_with_clipping_by_hand():
    p1, p2 = torch.tensor([1.0]), torch.tensor([2.0])
    opt, params, m, v, steps = _state([p1, p2])
    grads = [torch.tensor([3.0]), torch.tensor([4.0])]  # joint norm 5, clipped to 1: 0.6, 0.8
    norm = _step(params, grads, (m, v, steps), eps=0.0)
    assert norm.item() == pytest.approx(1.0, rel=1e-6)
    assert m[0].item() == pytest.approx(0.06, rel=1e-6) and m[1].item() == pytest.approx(0.08)
    assert v[0].item() == pytest.approx(0.001 * 0.36, rel=1e-5)
    # a first Adam step moves each weight by lr against its gradient's sign
    assert p1.item() == pytest.approx(0.9) and p2.item() == pytest.approx(1.9)
    assert [s.item() for s in steps] == [1.0, 1.0]
    assert opt.state[p1]["step"] is steps[0]  # torch's own state, written in place


@pytest.mark.parametrize("rectify", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_matches_torch_clip_and_optimizer_over_steps(rectify: bool, weight_decay: float):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    net = net.double()
    twin = copy.deepcopy(net)
    cls = torch.optim.RAdam if rectify else torch.optim.Adam
    kw = {"lr": 1e-2, "eps": 1e-8, "weight_decay": weight_decay}
    theirs, ours = cls(net.parameters(), **kw), cls(twin.parameters(), **kw)
    for _ in range(12):  # RAdam rectifies from step 6 on
        x = torch.randn(4, 5, dtype=torch.float64)
        for n in (net, twin):
            n.zero_grad()
            (n(x) ** 2).sum().mul(10).backward()
        want_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        want_norm = min(float(want_norm), 1.0)
        theirs.step()
        params, m, v, steps = adam_state(ours)
        grads = [p.grad for p in params]
        norm = _step(
            params, grads, (m, v, steps), lr=1e-2, weight_decay=weight_decay, rectify=rectify
        )
        assert norm.item() == pytest.approx(want_norm, rel=1e-6)
        for a, b in zip(net.parameters(), twin.parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-15)
    for a, b in zip(theirs.state.values(), ours.state.values()):
        torch.testing.assert_close(a["exp_avg_sq"], b["exp_avg_sq"], rtol=0, atol=1e-15)


def test_a_skipped_step_is_a_zero_gradient_step():
    p = torch.tensor([1.0, -1.0])
    ref = p.clone().requires_grad_()
    opt, params, m, v, steps = _state([p])
    m[0].fill_(0.5)
    torch_opt = torch.optim.Adam([ref], lr=0.1)
    torch_opt.state[ref] = {
        "step": torch.tensor(0.0),
        "exp_avg": torch.tensor([0.5, 0.5]),
        "exp_avg_sq": torch.zeros(2),
    }
    ref.grad = torch.zeros(2)
    torch_opt.step()
    nan = [torch.tensor([float("nan"), float("inf")])]
    norm = _step(params, nan, (m, v, steps), skip=torch.tensor(True))
    assert norm.item() == 0.0
    assert m[0].tolist() == pytest.approx([0.45, 0.45])  # the moment decays
    torch.testing.assert_close(p, ref.detach())
    assert torch.isfinite(p).all()


def test_compiled_step_equals_the_eager_one():
    """torch.compile (a C++ compiler on the CPU, Triton on a GPU) fuses the function: the
    same arithmetic, to float32 rounding; a second call reuses the compiled code."""
    torch.manual_seed(0)
    shapes = [(16, 1, 4, 4), (16,), (3, 7), (3,)]
    params = [torch.randn(s) for s in shapes]
    twins = [p.clone() for p in params]
    compiled = torch.compile(clipped_adam_step_)
    runs = [(clipped_adam_step_, params, _state(params)), (compiled, twins, _state(twins))]
    for call in range(2):  # the second call is a skipped step
        grads, skip = [torch.randn(s) * 3 for s in shapes], torch.tensor(call == 1)
        norms = [
            _step(ps, grads, state[2:], fn, lr=torch.tensor(1e-3), rectify=True, skip=skip)
            for fn, ps, state in runs
        ]
        torch.testing.assert_close(norms[0], norms[1])
        for a, b in zip(params, twins):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
