"""What the package's device checks share (check_package_gpu.py, check_kv_package_gpu.py): the skip
without torch or a CUDA device (exit 77, CTest's SKIP_RETURN_CODE), the error figures and the
PASS/FAIL report."""
import sys


def torch_or_skip():
    """torch, or exit 77 (skipped) when torch is not installed or sees no CUDA device."""
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        sys.exit(77)
    return torch


def rel_l2(a, b):
    """||a - b|| / ||b|| in float64."""
    import torch
    a, b = a.double().cpu(), b.double().cpu()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300)).item()


def lse_diff(a, b, sd=None):
    """(max |a - b| over finite entries (in units of sd when given), whether the non-finite entries agree)."""
    import torch
    a, b = a.double().cpu(), b.double().cpu()
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    same = torch.equal(fa, fb) and torch.equal(a[~fa], b[~fb])
    d = (a[fa & fb] - b[fa & fb]).abs()
    if sd is not None:
        d = d / sd[fa & fb].clamp_min(1e-30)
    return (d.max().item() if d.numel() else 0.0), same


class Report:
    """One row per check: printed as [PASS]/[FAIL] with its figures, counted, kept for --json."""

    def __init__(self):
        self.rows, self.failed = [], 0

    def add(self, check, name, ok, **figures):
        self.rows.append({"check": check, "case": name, "ok": bool(ok), **figures})
        self.failed += 0 if ok else 1
        figs = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
        print(f"[{'PASS' if ok else 'FAIL'}] {check}: {name} {figs}", flush=True)

    def expect_refusals(self, check, cases, error):
        """Each (needle, call) of cases must raise `error` whose message starts with needle."""
        for needle, call in cases:
            try:
                call()
                self.add(check, needle, False, message="no error raised")
            except error as e:
                self.add(check, needle, str(e).startswith(needle), message=str(e))
