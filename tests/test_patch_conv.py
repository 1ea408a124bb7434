"""PatchConv2d: the first conv as patches times weights, value by value against conv2d."""

import pytest
import torch
import torch.nn.functional as F

from trackmind.agent.network import IQNNetwork, PatchConv2d, conv_layout_for, patch_conv2d


def test_patch_conv2d_on_a_hand_computed_case():
    # one 3x3 image, one 2x2 kernel of ones, stride 1: each output sums its 2x2 window
    x = torch.arange(9.0).reshape(1, 1, 3, 3)
    w = torch.ones(1, 1, 2, 2)
    y = patch_conv2d(x, w, torch.tensor([0.5]), (1, 1))
    assert y.tolist() == [
        [[[0 + 1 + 3 + 4 + 0.5, 1 + 2 + 4 + 5 + 0.5], [3 + 4 + 6 + 7 + 0.5, 4 + 5 + 7 + 8 + 0.5]]]
    ]


@pytest.mark.parametrize(
    ("c_in", "c_out", "k", "s", "h", "w"),
    [(1, 16, 4, 2, 120, 160), (1, 4, 3, 1, 9, 11), (3, 8, 3, 2, 13, 10), (4, 5, 2, 2, 8, 8)],
)
def test_patch_conv2d_equals_conv2d(c_in, c_out, k, s, h, w):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, c_in, h, w, generator=g)
    weight = torch.randn(c_out, c_in, k, k, generator=g)
    bias = torch.randn(c_out, generator=g)
    y = patch_conv2d(x, weight, bias, (s, s))
    ref = F.conv2d(x, weight, bias, s)
    assert y.shape == ref.shape
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    assert y.is_contiguous(memory_format=torch.channels_last)
    # a channels_last weight (the GPU learner's layout) gives the same values
    cl = weight.to(memory_format=torch.channels_last)
    torch.testing.assert_close(patch_conv2d(x, cl, bias, (s, s)), ref, rtol=1e-5, atol=1e-5)


def test_padded_patch_conv_is_the_padded_conv2d():
    """PatchConv2d(pad=1), the Impala encoder's first conv: zero padding, then the same patch
    GEMM; value by value against conv2d with padding 1 (the GEMM path called directly, as a
    GPU runs it)."""
    g = torch.Generator().manual_seed(2)
    m = PatchConv2d(1, 4, 3, 1, pad=1)
    x = torch.randn(2, 1, 7, 9, generator=g)
    ref = F.conv2d(x, m.weight, m.bias, 1, 1)
    assert ref.shape == (2, 4, 7, 9)
    torch.testing.assert_close(m(x), ref)
    gemm = patch_conv2d(F.pad(x, [1, 1, 1, 1]), m.weight, m.bias, m.stride)
    torch.testing.assert_close(gemm, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.jit.script(m)(x), ref)


def test_patch_conv2d_weight_gradient_equals_conv2d():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 1, 12, 14, generator=g)
    w1 = torch.randn(6, 1, 4, 4, generator=g, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_(True)
    patch_conv2d(x, w1, None, (2, 2)).square().sum().backward()
    F.conv2d(x, w2, None, 2).square().sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-4, atol=1e-4)


def test_patch_conv_keeps_conv2d_parameters_and_scripts():
    m = PatchConv2d(1, 16, 4, 2)
    assert set(m.state_dict()) == {"weight", "bias"}
    x = torch.randn(2, 1, 20, 24)
    torch.testing.assert_close(torch.jit.script(m)(x), F.conv2d(x, m.weight, m.bias, 2))


def test_network_first_conv_is_a_patch_conv_and_layout_stays_on_cpu():
    net = IQNNetwork((1, 30, 40), 5, conv_channels=(8, 8), conv_kernels=(4, 3), conv_strides=(2, 1))
    convs = [m for m in net.image_head if isinstance(m, torch.nn.Conv2d)]
    assert isinstance(convs[0], PatchConv2d) and not isinstance(convs[1], PatchConv2d)
    assert conv_layout_for(net, "cpu") is net
    assert convs[1].weight.is_contiguous()  # CPU runs keep their layout
    img = torch.randint(0, 256, (2, 1, 30, 40), dtype=torch.uint8)
    floats, taus = torch.randn(2, 5), torch.rand(2, 3)
    before = net(img, floats, taus)
    net.to(memory_format=torch.channels_last)  # what conv_layout_for does on a GPU
    assert convs[1].weight.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(net(img, floats, taus), before, rtol=1e-5, atol=1e-5)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
def test_on_a_gpu_the_patch_path_equals_conv2d_eager_scripted_and_in_bf16():
    m = PatchConv2d(1, 16, 4, 2).cuda()
    conv_layout_for(m, "cuda")
    x = torch.randn(8, 1, 120, 160, device="cuda")
    ref = F.conv2d(x, m.weight.contiguous(), m.bias, 2)
    torch.testing.assert_close(m(x), ref, rtol=2e-3, atol=2e-3)  # TF32 may be on
    torch.testing.assert_close(torch.jit.script(m)(x), ref, rtol=2e-3, atol=2e-3)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref, rtol=5e-2, atol=5e-2)
