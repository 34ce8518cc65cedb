"""The verdict of `oncelog spark-demo`: it must fail on a duplicate, a loss or a wrong enrichment."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import typer

from oncelog.cli.spark_demo import _load_pipeline, _verdict

pipeline = _load_pipeline()
SPARK = ("local[2,2]", [("driver SIGKILLs / restarts from checkpoint", "1 / 1")])


def _produced(n: int) -> dict:
    orders = {}
    for i in range(n):
        order = {
            "order_id": f"o-{i:07d}",
            "customer": f"c-{i % 7:03d}",
            "sku": "sku-1",
            "quantity": i % 5 + 1,
            "unit_price_cents": 1000 + i,
        }
        orders[order["order_id"]] = (order, i % 2, i // 2)
    return orders


def _output(produced: dict) -> list:
    return [SimpleNamespace(value=json.dumps(pipeline.enrich(*entry)).encode()) for entry in produced.values()]


def test_verdict_passes_when_every_order_is_there_once() -> None:
    produced = _produced(20)
    _verdict(pipeline, produced, _output(produced), 20, SPARK, (3, 1), 1.0)


@pytest.mark.parametrize("damage", ["duplicate", "missing", "wrong_total", "unexpected"])
def test_verdict_fails_on_any_difference(damage: str) -> None:
    produced = _produced(20)
    output = _output(produced)
    if damage == "duplicate":
        output.append(output[3])
    elif damage == "missing":
        output.pop(5)
    elif damage == "wrong_total":
        value = json.loads(output[2].value)
        value["total_cents"] += 1
        output[2] = SimpleNamespace(value=json.dumps(value).encode())
    else:
        output.append(SimpleNamespace(value=json.dumps({"order_id": "o-9999999"}).encode()))
    with pytest.raises(typer.Exit) as exited:
        _verdict(pipeline, produced, output, 20, SPARK, (3, 1), 1.0)
    assert exited.value.exit_code == 1


def test_reference_enrichment_matches_the_documented_example() -> None:
    order = {"order_id": "o-0000042", "customer": "c-017", "sku": "sku-3", "quantity": 2, "unit_price_cents": 1299}
    assert pipeline.enrich(order, 1, 118) == {
        "order_id": "o-0000042",
        "customer": "c-017",
        "region": "apac",
        "quantity": 2,
        "total_cents": 2598,
        "tier": "small",
        "source_partition": 1,
        "source_offset": 118,
    }
