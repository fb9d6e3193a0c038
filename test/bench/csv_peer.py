"""pandas.read_csv on one CSV file, for tfd_bench_data: prints the best of `--repeat` runs in
seconds for each setting its users would try (the C engine as is, with float32 columns, and with
the 'high' float parser), then the fastest as `best SECONDS SETTING`."""
import argparse
import time

import numpy as np
import pandas as pd

p = argparse.ArgumentParser()
p.add_argument("path")
p.add_argument("--repeat", type=int, default=3)
a = p.parse_args()
settings = {
    "c": dict(engine="c"),
    "c+float32": dict(engine="c", dtype=np.float32),
    "c+high": dict(engine="c", float_precision="high"),
}
best = (float("inf"), "-")
for name, kw in settings.items():
    t = float("inf")
    for _ in range(a.repeat):
        start = time.perf_counter()
        frame = pd.read_csv(a.path, **kw)
        t = min(t, time.perf_counter() - start)
        del frame
    print(f"{name} {t:.4f}")
    best = min(best, (t, name))
print(f"best {best[0]:.4f} {best[1]}")
