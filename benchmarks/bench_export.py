"""Export benchmark: write the Chakra execution traces of GPT-3 175B (TP8, PP8, 1F1B, micro-batch
1, 8 micro-batches per pipeline) on 4,096 and 32,768 H100s and print the export rate.

Run: ``python benchmarks/bench_export.py [--dir DIR] [--gpus N ...]``. Each point runs in a fresh
process (one core) and writes into a new temporary directory under ``DIR`` (default: the
system's temporary directory), which is deleted afterwards. The time is the whole
``export_chakra`` call: building the graph and the cost models, the per-stage templates, every
rank's file and the side files (groups, network, system, memory). Columns: ``ranks/s`` over
that whole time; ``write s`` the part spent opening, writing and closing trace files and
``MB/s`` the file system's rate during it; ``gen ranks/s`` the rate of everything else (the
generator itself). Trace files are large (about 3,000 nodes, 0.27 MB per rank here), so the
end-to-end rate is bounded by how fast the file system takes writes; ``--dir /dev/shm``
measures with a RAM file system.

The global batch is 8 × dp (4,096 at 32,768 GPUs, the README's example), so both points have
the same per-rank trace and differ only in the number of ranks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

POINTS = [4_096, 32_768]

CHILD = """
import json, os, resource, shutil, tempfile, time
from codesign.api import build_run
from codesign.trace.chakra import export_chakra
run = build_run(model="gpt3-175b", gpu="h100", num_gpus={gpus}, tp=8, pp=8,
                micro_batch_size=1, global_batch_size={gbs})
out = tempfile.mkdtemp(prefix="bench_export_", dir={dir!r})
try:
    t0 = time.perf_counter()
    r = export_chakra(run, os.path.join(out, "gpt3"))
    wall = time.perf_counter() - t0
finally:
    shutil.rmtree(out, ignore_errors=True)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(gpus={gpus}, wall_s=wall, write_s=r.write_s,
                      ranks_per_s=r.num_ranks / wall,
                      bytes=r.bytes_written, nodes=max(r.nodes_per_stage), peak_MiB=rss)))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="where to write (a temporary directory is made and removed there)")
    ap.add_argument("--gpus", type=int, nargs="+", default=POINTS, help="ranks per point")
    args = ap.parse_args()
    print(f"writing under {args.dir}")
    print(f"{'ranks':>8} {'nodes/rank':>10} {'MB/rank':>8} {'GB':>7} {'wall s':>8} "
          f"{'ranks/s':>8} {'write s':>8} {'MB/s':>7} {'gen ranks/s':>11} {'peak MiB':>9}")
    for gpus in args.gpus:
        gbs = 8 * gpus // 64  # 8 micro-batches per pipeline (dp = gpus / 64)
        code = CHILD.format(gpus=gpus, gbs=gbs, dir=args.dir)
        out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code],
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        mb = r["bytes"] / 1e6
        gen_s = r["wall_s"] - r["write_s"]
        print(f"{r['gpus']:>8,} {r['nodes']:>10,} {mb / r['gpus']:>8.3f} {mb / 1e3:>7.2f} "
              f"{r['wall_s']:>8.2f} {r['ranks_per_s']:>8,.0f} {r['write_s']:>8.2f} "
              f"{mb / r['write_s']:>7.0f} {r['gpus'] / gen_s:>11,.0f} {r['peak_MiB']:>9.1f}")


if __name__ == "__main__":
    main()
