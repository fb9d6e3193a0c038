#!/usr/bin/env python3
"""Writes a synthetic customer-churn table with categorical columns (configs/jobs/csv-churn-embedding.json).

No real categorical data set ships on these machines, so this one is generated, deterministically
(seed 2026, the standard library's random only), with the shape of the telecom churn tables users
bring: numeric columns (tenure, monthly charges, support calls, age) and categorical ones of small
to middling cardinality (contract, payment, plan, region, device, and a 60-value city column whose
long tail is rare). Whether a customer churns is drawn from a logistic model: each category has its
own effect (a few strong, most weak), the numbers act through smooth terms, contract x plan
interact, and the noise is real, so no model reaches 100% (the Bayes accuracy is printed).

    scripts/make_churn_csv.py [OUT_DIR]   # default data/churn: train.csv (20,000 rows), test.csv (5,000)
"""
import math
import os
import random
import sys

SEED = 2026
TRAIN_ROWS, TEST_ROWS = 20000, 5000

CONTRACT = ["month-to-month", "one-year", "two-year"]
PAYMENT = ["electronic-check", "mailed-check", "bank-transfer", "credit-card"]
PLAN = ["basic", "standard", "premium", "family", "student"]
REGION = ["north", "south", "east", "west", "central", "coastal", "mountain", "islands"]
DEVICE = ["android", "ios", "web", "desktop", "smart-tv", "none"]


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("data", "churn")
    rng = random.Random(SEED)
    cities = ["city-%02d" % i for i in range(60)]
    # Zipf-like city popularity: a few big cities, a long tail of rare ones.
    city_weights = [1.0 / (i + 1) ** 1.1 for i in range(len(cities))]
    effects = {
        "contract": dict(zip(CONTRACT, [1.2, -0.4, -1.6])),
        "payment": dict(zip(PAYMENT, [0.7, 0.0, -0.3, -0.4])),
        "plan": {p: rng.gauss(0, 0.4) for p in PLAN},
        "region": {r: rng.gauss(0, 0.25) for r in REGION},
        "device": {d: rng.gauss(0, 0.3) for d in DEVICE},
        "city": {c: rng.gauss(0, 0.6) for c in cities},
    }
    interaction = {(c, p): rng.gauss(0, 0.5) for c in CONTRACT for p in PLAN}

    def row():
        contract = rng.choices(CONTRACT, [0.55, 0.25, 0.20])[0]
        payment = rng.choice(PAYMENT)
        plan = rng.choices(PLAN, [0.3, 0.3, 0.15, 0.15, 0.1])[0]
        region = rng.choice(REGION)
        device = rng.choices(DEVICE, [0.35, 0.3, 0.15, 0.1, 0.05, 0.05])[0]
        city = rng.choices(cities, city_weights)[0]
        tenure = min(72, int(rng.expovariate(1 / 20.0)) + 1)
        monthly = round(max(15.0, rng.gauss(65, 25)), 2)
        calls = min(12, int(rng.expovariate(1 / 1.5)))
        age = int(min(85, max(18, rng.gauss(45, 15))))
        z = (-0.6 + effects["contract"][contract] + effects["payment"][payment] + effects["plan"][plan]
             + effects["region"][region] + effects["device"][device] + effects["city"][city]
             + interaction[(contract, plan)] - 0.9 * math.log(tenure) / math.log(72) * 2
             + 0.015 * (monthly - 65) + 0.35 * calls - 0.01 * (age - 45))
        p = 1 / (1 + math.exp(-z))
        churn = "yes" if rng.random() < p else "no"
        fields = [contract, payment, plan, region, device, city, str(tenure), "%.2f" % monthly, str(calls), str(age), churn]
        return fields, max(p, 1 - p)

    header = "contract,payment,plan,region,device,city,tenure,monthly_charges,support_calls,age,churn\n"
    os.makedirs(out_dir, exist_ok=True)
    for name, n in (("train.csv", TRAIN_ROWS), ("test.csv", TEST_ROWS)):
        bayes, yes = 0.0, 0
        with open(os.path.join(out_dir, name), "w") as f:
            f.write(header)
            for _ in range(n):
                fields, best = row()
                bayes += best
                yes += fields[-1] == "yes"
                f.write(",".join(fields) + "\n")
        print("%s: %d rows, %.1f%% churn, Bayes accuracy %.2f%%" % (os.path.join(out_dir, name), n, 100.0 * yes / n, 100.0 * bayes / n))


if __name__ == "__main__":
    main()
