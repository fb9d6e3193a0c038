"""Thread settings for the PyTorch peers, applied before torch is imported.

Debian's PyTorch runs its GEMMs on OpenBLAS (pthreads), whose thread count torch.set_num_threads
does not govern: left alone, OpenBLAS starts one thread per core, and on a small machine those
contend with the process's own threads and halve its speed. A PyTorch user tuning a CPU job sets
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS before torch loads; so does every peer
here, to the --threads it was given (default 1), so that each peer runs as its users would run it.

Import this module first, before numpy and torch: `import peer_env` reads --threads from sys.argv.
"""
import os
import sys


def _threads_from_argv(argv):
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


THREADS = _threads_from_argv(sys.argv[1:])
if not THREADS.isdigit() or int(THREADS) < 1:
    print(f"peer_env: --threads must be a whole number >= 1, got {THREADS!r}", file=sys.stderr)
    sys.exit(2)
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = THREADS
if "torch" in sys.modules:
    print("peer_env: imported after torch; the thread settings come too late", file=sys.stderr)
    sys.exit(2)


def settings():
    """What the peer ran with, for its JSON line."""
    return {name.lower(): os.environ[name] for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
