"""A realistic pipeline against a running privacy-ledger server.

1. record a DP-SGD training run the way Opacus users would (noise multiplier, sample rate,
   steps), after checking with a dry run that it fits;
2. calibrate: ask the ledger for the least Gaussian noise a histogram release may use with
   what is left;
3. reserve that budget, compute the noisy histogram with numpy, commit (or release on failure).

Run it twice: the second time the budget is spent, and the ledger says so.

Run (after ``make run`` and with an admin key)::

    PRIVACY_LEDGER_API_KEY=<key> .venv/bin/python examples/pipeline.py
"""

from __future__ import annotations

import numpy as np
from privacy_ledger_client import BudgetExceeded, LedgerClient, subsampled_gaussian

DATASET = "example-clinic-visits"


def noisy_histogram(
    values: np.ndarray, bins: int, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """Histogram with Gaussian noise; one person adds one count, so the L2 sensitivity is 1."""
    counts = np.bincount(values, minlength=bins).astype(float)
    return counts + rng.normal(0.0, sigma, size=bins)


def main() -> None:
    rng = np.random.default_rng(7)
    visits = rng.integers(0, 12, size=5_000)  # month of each visit: the private data
    with LedgerClient() as ledger:
        if DATASET not in {d.name for d in ledger.datasets()}:
            ledger.create_dataset(DATASET, epsilon=8.0, delta=1e-6, adaptive=True)

        # 1. a DP-SGD run, as recorded from Opacus' parameters
        run = subsampled_gaussian(sigma=1.1, sample_rate=256 / 50_000, steps=3_000)
        try:
            ledger.dry_run(DATASET, run)
            ledger.charge(
                DATASET, run, label="model v3 training", metadata={"optimizer": "DP-Adam"}
            )
            print("training run recorded")
        except BudgetExceeded as exc:
            print(f"training refused: {exc.detail}")

        # 2. calibrate: the least noise that still fits what is left of the budget
        try:
            plan = ledger.calibrate(DATASET, "gaussian", sensitivity=1.0)
        except BudgetExceeded as exc:
            print(f"no histogram possible: {exc.detail}")
        else:
            mechanism = plan.mechanism
            print(f"a histogram now needs sigma >= {mechanism['sigma']:.2f}")
            if mechanism["sigma"] > 50:  # counts are in the hundreds: not worth releasing
                print("too noisy to be useful with what is left: not spending it")
                return
            # 3. reserve, compute, commit (an exception inside the block releases the hold)
            with ledger.reservation(DATASET, mechanism, label="monthly visits histogram") as hold:
                release = noisy_histogram(visits, 12, mechanism["sigma"], rng)
            print(
                f"reservation {hold.id}: {hold.outcome}; released {np.round(release).astype(int)}"
            )

        budget = ledger.budget(DATASET)
        spent = budget.spent
        print(
            f"{DATASET}: spent epsilon {spent.epsilon:.3f} of {budget.budget.epsilon} "
            f"at delta {spent.delta:g} ({spent.method}), {budget.entries} entries"
        )


if __name__ == "__main__":
    main()
