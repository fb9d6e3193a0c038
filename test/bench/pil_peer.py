"""The Pillow side of tfd_bench_images: decodes every PNG/JPEG under a folder of class folders,
one file after another on this one thread, as a PyTorch ImageFolder's loader does
(Image.open, then load()). The file list is made before the clock starts; the fastest of
--repeat passes is printed as one JSON line: {"images": N, "seconds": S, "pillow": VERSION}.

    /usr/bin/python3 test/bench/pil_peer.py FOLDER [--repeat 3]
"""
import argparse
import json
import os
import time

from PIL import Image, __version__


def files_under(root):
    out = []
    for cls in sorted(os.listdir(root)):
        for dirpath, dirnames, names in os.walk(os.path.join(root, cls)):
            dirnames.sort()
            out += [os.path.join(dirpath, n) for n in sorted(names) if n.lower().endswith((".png", ".jpg", ".jpeg"))]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    paths = files_under(args.folder)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        for p in paths:
            with Image.open(p) as im:
                im.load()
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"images": len(paths), "seconds": best, "pillow": __version__}))


if __name__ == "__main__":
    main()
