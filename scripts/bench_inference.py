"""Collector inference: Q values of a batch of cars (K taus each), per precision and layout.

    python scripts/bench_inference.py                              # CPU (1 thread) and CUDA
    python scripts/bench_inference.py --devices cuda --batches 32 128 416 --json F

What a collector (or the inference server) does per car-action: the network's forward on
the cars' frames and floats with K random taus (network.n_quantiles_inference), the mean
over taus, the Q values copied back to the host. Rows per device, precision and memory
format, at each batch size (a server's batch is every waiting collector's cars):

- fp32: the weights' own precision, float32 matmuls in full precision (torch's default,
  what a freshly spawned process gets);
- tf32: the same with TF32 tensor-core matmuls (`torch.set_float32_matmul_precision('high')`);
- bf16: under bf16 autocast (collector.precision=bf16);
- NHWC: the conv weights in channels_last memory format, as processes that infer on a GPU
  keep them (with NCHW weights the first conv's GEMM still hands NHWC to the second);
- graph 1 (`--graph 0 1`, CUDA rows): the forward captured once and replayed as a CUDA
  graph (collector.cuda_graph), so the row shows what launching ~100 kernels costs the host.

cuDNN's autotuning is off, as in collectors and the inference server (their batch sizes
change); `--cudnn-benchmark` turns it on (each row's warm-up then includes the tuning).

Beside the measured time each row gives the arithmetic it did (FLOPs of the forward,
counted from the layer shapes) and the rate that implies, so the distance to the card's rate
is plain. Figures are medians of repeated, synchronised timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from omegaconf import OmegaConf

from trackmind.agent.graphed_inference import GraphedQ
from trackmind.agent.network import IQNNetwork, encoder_macs
from trackmind.agent.network_config import build_network, network_config
from trackmind.cli import OneLineParser, int_at_least

CONF = Path(__file__).resolve().parents[1] / "conf"
FLOAT_DIM = 184


def forward_flops(net: IQNNetwork, k: int) -> float:
    """Multiply-adds x 2 of one car's forward with k taus: convs, float MLP, tau embedding,
    the elementwise product and the dueling heads (biases and activations left out)."""
    macs = 0
    if net.image_shape is not None:
        macs += encoder_macs(net.image_head, net.image_shape)
    linears = lambda mod: [m for m in mod.modules() if isinstance(m, torch.nn.Linear)]  # noqa: E731
    macs += sum(m.in_features * m.out_features for m in linears(net.float_head))
    per_tau = sum(m.in_features * m.out_features for m in linears(net.tau_embedding))
    per_tau += net.feature_dim  # the product of embedding and state features
    per_tau += sum(m.in_features * m.out_features for m in linears(net.advantage))
    per_tau += sum(m.in_features * m.out_features for m in linears(net.value))
    return 2.0 * (macs + k * per_tau)


def variants(device: str, precisions: list[str], layouts: list[str]) -> list[tuple[str, str]]:
    """(precision, layout) rows of a device: the CPU runs fp32 NCHW only (bf16 and TF32 are
    GPU modes here)."""
    if device == "cpu":
        return [("fp32", "NCHW")]
    return [(p, m) for p in precisions for m in layouts]


def time_batch(
    net, img, floats, k: int, precision: str, device: torch.device, reps: int, graph: bool = False
):
    """Median seconds of one batch's Q values, copied to the host as a collector reads them;
    `graph`: replayed as a captured CUDA graph (collector.cuda_graph, GraphedQ), the
    capture falling in the warm-up."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    bf16 = precision == "bf16"
    graphed = None
    if graph:
        dtype = torch.bfloat16 if bf16 else None
        graphed = GraphedQ(net, k, (floats.shape[0],), None, autocast_dtype=dtype)
    cast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 and not graph else nullcontext()
    times = []
    with torch.inference_mode(), cast:
        for i in range(reps + 3):
            t0 = time.perf_counter()
            if graphed is not None:
                q = graphed(img, floats).cpu()
            else:
                taus = torch.rand(floats.shape[0], k, device=device)
                q = net(img, floats, taus).mean(dim=1).float().cpu()
            if i >= 3:  # warm-up: allocations, cuDNN's autotuning of this shape
                times.append(time.perf_counter() - t0)
    assert q.shape == (floats.shape[0], net.n_actions)
    if graphed is not None and graphed.failed:
        raise RuntimeError(f"CUDA graph capture failed: {graphed.failed}")
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", default="iqn_linesight", help="a conf/network preset")
    ap.add_argument("--devices", nargs="+", choices=("cpu", "cuda"), help="default: all found")
    ap.add_argument("--batches", nargs="+", type=int_at_least(1), default=[1, 32, 128, 416])
    ap.add_argument("--taus", type=int_at_least(1), help="default: the preset's inference taus")
    ap.add_argument(
        "--precision", nargs="+", choices=("fp32", "tf32", "bf16"), default=["fp32", "tf32", "bf16"]
    )
    ap.add_argument("--layouts", nargs="+", choices=("NCHW", "NHWC"), default=["NCHW", "NHWC"])
    ap.add_argument("--reps", type=int_at_least(1), default=20)
    ap.add_argument(
        "--graph",
        nargs="+",
        type=int,
        choices=(0, 1),
        default=[0],
        help="CUDA rows: 1 replays the forward as a captured graph (collector.cuda_graph)",
    )
    ap.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN autotuning on")
    ap.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in devices and not torch.cuda.is_available():
        ap.error("--devices cuda: CUDA is not available")
    raw = OmegaConf.to_container(OmegaConf.load(CONF / "network" / f"{args.preset}.yaml"))
    frame = None if raw["image_shape"] is None else tuple(raw["image_shape"][1:])
    nc = network_config(raw, FLOAT_DIM, frame)
    k = args.taus or nc.n_quantiles_inference
    torch.set_num_threads(1)  # a collector's one thread
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    rows = []
    for dev_name in devices:
        device = torch.device(dev_name)
        for precision, layout in variants(dev_name, args.precision, args.layouts):
            net = build_network(nc, FLOAT_DIM, frame).to(device).eval()
            if layout == "NHWC":
                net = net.to(memory_format=torch.channels_last)
            flops = forward_flops(net, k)
            sizes = args.batches if dev_name == "cuda" else [x for x in args.batches if x <= 32]
            graphs = args.graph if dev_name == "cuda" else [0]
            for b, graph in ((b, g) for b in sizes for g in graphs):
                img = None
                if nc.image_shape is not None:
                    shape = (b, *nc.image_shape)
                    img = torch.randint(0, 256, shape, dtype=torch.uint8, device=device)
                floats = torch.randn(b, FLOAT_DIM, device=device)
                reps = args.reps if dev_name == "cuda" else max(3, args.reps // 4)
                s = time_batch(net, img, floats, k, precision, device, reps, bool(graph))
                row = {
                    "device": dev_name,
                    "precision": precision,
                    "layout": layout,
                    "graph": graph,
                    "taus": k,
                    "batch": b,
                    "ms_per_batch": 1e3 * s,
                    "ms_per_car": 1e3 * s / b,
                    "tflops": flops * b / s / 1e12,
                }
                rows.append(row)
                print(
                    f"{dev_name} {precision} {layout} graph {graph} batch {b}: "
                    f"{row['ms_per_batch']:.2f} ms, "
                    f"{row['ms_per_car']:.4f} ms a car, {row['tflops']:.1f} TFLOP/s",
                    flush=True,
                )
    name = torch.cuda.get_device_name() if "cuda" in devices else "no GPU"
    print(f"\n{args.preset}, {k} taus, {flops / 1e9:.3f} GFLOP a car; cuda = {name}")
    print("| device | precision | layout | graph | batch | ms/batch | ms/car-action | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['device']} | {r['precision']} | {r['layout']} | {r['graph']} | {r['batch']} "
            f"| {r['ms_per_batch']:.2f} | {r['ms_per_car']:.4f} | {r['tflops']:.1f} |"
        )
    if args.json:
        meta = {"device": name, "cudnn_benchmark": bool(args.cudnn_benchmark)}
        args.json.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
