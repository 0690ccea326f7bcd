"""The tables `benchmarks.quality` trains on, each written as the CSV a requester would have.

scikit-learn's bundled tables as they ship (iris, wine, breast cancer, digits with one column per pixel, and
diabetes, whose target is a number), and two generated ones built like real tables: numbers at skewed scales
(incomes in the tens of thousands beside rates near 0.01), columns of words, an id column, and missing cells.
`churn` has one customer in ten churning (scored by balanced accuracy, `compute.requester.baseline.metric_of`);
`households` three balanced labels. Each generator is seeded, so every run trains on the same rows.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib
from collections.abc import Callable

import numpy as np

MISSING_SHARE = 0.04
"""The share of cells left empty in a generated table's columns that have gaps."""


@dataclasses.dataclass(frozen=True)
class Table:
    """A table's name, its label column, its task, and how to write it as a CSV of `rows` rows (None: all)."""

    name: str
    label: str
    write: Callable[[pathlib.Path, int | None], None]
    task: str = "classification"


def _write(path: pathlib.Path, header: list[str], rows) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)


def _bundled(loader_name: str, label: str) -> Callable[[pathlib.Path, int | None], None]:
    def write(path: pathlib.Path, rows: int | None) -> None:
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, loader_name)()
        names = getattr(bunch, "target_names", None)
        targets = [t if names is None else names[t] for t in bunch.target]
        _write(path, [*map(str, bunch.feature_names), label], ([*row, t] for row, t in zip(bunch.data, targets)))
    return write


def _gaps(generator: np.random.Generator, cells: list) -> list:
    """`cells` with about `MISSING_SHARE` of them emptied."""
    return ["" if generator.random() < MISSING_SHARE else cell for cell in cells]


def write_churn(path: pathlib.Path, rows: int | None) -> None:
    """Customers, one in ten of whom churned: short tenure, many support calls and the basic plan raise the risk,
    a discount lowers it, and the city matters a little."""
    n = rows or 20_000
    g = np.random.Generator(np.random.PCG64(34))
    cities = np.array(["Lyon", "Porto", "Gdansk", "Leeds", "Turin", "Ghent", "Malmo", "Cork"])
    city_effect = g.normal(0, 0.4, len(cities))
    plans = np.array(["basic", "plus", "premium"])
    city, plan = g.integers(0, len(cities), n), g.choice(3, n, p=[0.5, 0.3, 0.2])
    age, tenure = g.integers(18, 80, n), g.integers(0, 120, n)
    income = np.round(np.exp(g.normal(10.5, 0.6, n)), 2)
    spend = np.round(g.gamma(2.0, 30.0, n) * (1 + plan), 2)
    calls, discount = g.poisson(1.5, n), np.round(g.beta(1.5, 12, n), 4)
    risk = (-0.03 * tenure + 0.6 * calls + 1.2 * (plan == 0) - 8 * discount + city_effect[city]
            + 0.5 * (income < 25_000) * (spend > 80) + g.normal(0, 0.8, n))
    churned = np.where(risk > np.quantile(risk, 0.9), "yes", "no")
    header = ["customer_id", "age", "income", "tenure_months", "monthly_spend", "support_calls", "discount_rate",
              "city", "plan", "churned"]
    _write(path, header, ([f"C{i:07d}", age[i], *_gaps(g, [income[i], tenure[i]]), spend[i], calls[i], discount[i],
                           *_gaps(g, [cities[city[i]]]), plans[plan[i]], churned[i]] for i in range(n)))


def write_households(path: pathlib.Path, rows: int | None) -> None:
    """Households sorted into three tariffs from their size, floor area, yearly kWh (thousands), heating and
    region, with a non-linear pull between area and consumption."""
    n = rows or 20_000
    g = np.random.Generator(np.random.PCG64(35))
    regions, heating = np.array(["north", "south", "east", "west", "islands"]), np.array(["gas", "heat pump",
                                                                                         "oil", "electric"])
    region, heat = g.integers(0, len(regions), n), g.choice(4, n, p=[0.4, 0.25, 0.15, 0.2])
    size = g.integers(1, 7, n)
    area = np.round(g.lognormal(4.4, 0.4, n) * (0.7 + 0.15 * size), 1)
    kwh = np.round(area * g.normal(30, 6, n) * (1 + 0.8 * (heat == 3)), 0)
    solar = np.round(g.beta(1, 6, n), 3)
    scores = np.stack([
        0.02 * area - 0.6 * size + 1.0 * (heat == 1) + g.normal(0, 0.7, n),
        0.0004 * kwh - 2.5 * solar + 0.8 * (region == 4) + g.normal(0, 0.7, n),
        0.5 * size + 0.9 * (heat == 2) - 0.3 * (region == 1) + 0.6 * (kwh / area > 40) + g.normal(0, 0.7, n),
    ], axis=1)
    scores -= scores.mean(axis=0)
    tariff = np.array(["flat", "peak", "green"])[scores.argmax(axis=1)]
    header = ["household", "size", "floor_area_m2", "yearly_kwh", "solar_share", "heating", "region", "tariff"]
    _write(path, header, ([f"H-{i}", size[i], *_gaps(g, [area[i], kwh[i]]), solar[i], heating[heat[i]],
                           *_gaps(g, [regions[region[i]]]), tariff[i]] for i in range(n)))


TABLES = {
    "iris": Table("iris", "species", _bundled("load_iris", "species")),
    "wine": Table("wine", "cultivar", _bundled("load_wine", "cultivar")),
    "breast_cancer": Table("breast_cancer", "diagnosis", _bundled("load_breast_cancer", "diagnosis")),
    "digits": Table("digits", "digit", _bundled("load_digits", "digit")),
    "churn": Table("churn", "churned", write_churn),
    "households": Table("households", "tariff", write_households),
    "diabetes": Table("diabetes", "progression", _bundled("load_diabetes", "progression"), task="regression"),
}
