"""P1 acceptance run: `npuport port --preset mmbert-base --random-init --backend onnxruntime,openvino,inductor
--seq-len 512`, recorded with proof and parity figures, wall time, peak RSS and disk use.

    python benchmarks/port_mmbert_base.py [--seq-len 512] [--keep DIR]
"""

import argparse
import shutil
import tempfile
import time

from common import meta, write_result

from npuport.api import ModelSource, PortConfig, port
from npuport.runtimes import ShapeSpec
from npuport.ui import Progress


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mmbert-base")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--backends", default="onnxruntime,openvino,inductor")
    ap.add_argument("--keep", help="keep the artifacts in this directory (default: a temp dir, removed)")
    args = ap.parse_args()
    out = args.keep or tempfile.mkdtemp(prefix="npuport-bench-")
    t0 = time.perf_counter()
    try:
        report = port(PortConfig(source=ModelSource(preset=args.preset, random_init=True), out=out + "/out",
                                 runtimes=tuple(args.backends.split(",")), shapes=ShapeSpec(buckets=(args.seq_len,)),
                                 overwrite=True), Progress())
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    name = f"port_{args.preset.replace('-', '_')}_{args.seq_len}"
    write_result(name, {**meta("port_mmbert_base.py"), "command": f"npuport port --preset {args.preset} --random-init "
                        f"--backend {args.backends} --seq-len {args.seq_len}", "seconds": round(time.perf_counter() - t0, 1),
                        "report": report})


if __name__ == "__main__":
    main()
