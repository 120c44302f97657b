#!/usr/bin/env python3
"""Builds the byte-level text corpus of the tiny MLA models from Debian's python3.11-doc.

Source: the reStructuredText sources that Sphinx ships beside the HTML of the Python 3.11
documentation (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt, Debian package
python3.11-doc, pulled in by python3-doc). Every file is read as raw bytes (UTF-8 kept as is:
the models are byte-level, vocabulary 256 + 4 reserved ids), documents are concatenated in
sorted path order with one blank line between them, and each document goes whole to one split
chosen by a hash of its relative path, so the same Debian package version always gives the
same bytes (SHA-256 recorded in datasets/README.md):
    sha256(relpath)[0:4] as an integer mod 100:  0..4 -> heldout, 5..9 -> calib, else train.
Outputs (git-ignored): <out>/train.bin, calib.bin, heldout.bin and corpus.json (sizes,
SHA-256 of each split, file counts, source package version).
Usage: python3 datasets/corpus/build_corpus.py [--src DIR] [--out datasets/corpus]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

DEFAULT_SRC = "/usr/share/doc/python3.11/html/_sources"
SPLITS = ("train", "calib", "heldout")


def split_of(relpath: str) -> str:
    bucket = int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:4], "big") % 100
    if bucket < 5:
        return "heldout"
    if bucket < 10:
        return "calib"
    return "train"


def package_version() -> str:
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", "python3.11-doc"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=DEFAULT_SRC)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    if not os.path.isdir(args.src):
        print(f"build_corpus: source folder {args.src} not found (install python3.11-doc)", file=sys.stderr)
        return 1
    files = []
    for root, _, names in os.walk(args.src):
        for n in names:
            if n.endswith(".rst.txt"):
                files.append(os.path.relpath(os.path.join(root, n), args.src))
    files.sort()
    if not files:
        print(f"build_corpus: no *.rst.txt under {args.src}", file=sys.stderr)
        return 1
    parts = {s: [] for s in SPLITS}
    counts = {s: 0 for s in SPLITS}
    for rel in files:
        with open(os.path.join(args.src, rel), "rb") as f:
            data = f.read().replace(b"\r\n", b"\n").strip(b"\n")
        if not data:
            continue
        s = split_of(rel)
        parts[s].append(data + b"\n\n")
        counts[s] += 1
    os.makedirs(args.out, exist_ok=True)
    manifest = {"source": args.src, "package": "python3.11-doc", "package_version": package_version(),
                "rule": "sha256(relpath)[0:4] mod 100: 0-4 heldout, 5-9 calib, else train",
                "splits": {}}
    for s in SPLITS:
        blob = b"".join(parts[s])
        # Written to a temp file and renamed only when complete.
        fd, tmp = tempfile.mkstemp(dir=args.out, prefix=f".{s}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, os.path.join(args.out, f"{s}.bin"))
        manifest["splits"][s] = {"file": f"{s}.bin", "bytes": len(blob), "documents": counts[s],
                                 "sha256": hashlib.sha256(blob).hexdigest()}
        print(f"{s:8s} {len(blob):9d} bytes {counts[s]:4d} docs sha256 {manifest['splits'][s]['sha256']}")
    with open(os.path.join(args.out, "corpus.json.tmp"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(args.out, "corpus.json.tmp"), os.path.join(args.out, "corpus.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
