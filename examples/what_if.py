"""What-if accounting without a server: compose a planned release and see what it costs.

Run: ``.venv/bin/python examples/what_if.py``. Uses the pure core (``app.accounting``) that the
service itself uses, so the numbers are the ones ``POST /v1/accounting/compose`` returns.
"""

from __future__ import annotations

from app.accounting.curve import compose
from app.accounting.filters import FilterKind, spend
from app.accounting.mechanisms import Gaussian, Laplace, SubsampledGaussian


def main() -> None:
    plan = [
        Gaussian(sigma=8.0, sensitivity=1.0, count=12),  # twelve noisy counts
        Laplace(epsilon=0.05, count=4),  # four noisy sums with pure DP
        SubsampledGaussian(sigma=1.1, sample_rate=0.004, steps=2_500),  # one DP-SGD run
    ]
    total = compose([m.curve() for m in plan])
    for delta in (1e-5, 1e-6, 1e-9):
        s = spend(FilterKind.RDP, total, delta)
        print(f"delta={delta:g}: epsilon={s.epsilon:.4f} ({s.method}, order {s.order})")


if __name__ == "__main__":
    main()
