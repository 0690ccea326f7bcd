"""`python -m benchmarks.record`: a benchmark's last JSON line kept, and the performance table regenerated from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import record
from benchmarks.record import BEGIN, END, Figures, RecordError

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = f"# Performance\n\nIntro.\n\n{BEGIN}\nold table\n{END}\n\n## Details\n\nProse stays.\n"


def kept(name: str, quick: bool, result: dict) -> Figures:
    return Figures(name=name, quick=quick, result=result, recorded="2026-11-26 02:00 UTC", commit="abc1234", load=1.5)


def test_the_last_json_line_is_taken_whatever_came_before_it():
    assert record.last_json_object("warming up\n{\"a\": 1}\nstep 2\n{\"txs\": 10, \"crashes\": 0}\n\n") == {
        "txs": 10, "crashes": 0}


@pytest.mark.parametrize("output, says", [
    ("", "printed nothing"),
    ("done\n", "not JSON"),
    ("[1, 2]\n", "not an object"),
])
def test_output_without_a_json_object_last_is_refused(output, says):
    with pytest.raises(RecordError, match=says):
        record.last_json_object(output)


def test_a_known_benchmark_shows_its_headline_figures_in_order_and_others_their_first_scalars():
    network = kept("network_throughput", False, {"steps": [1, 2], "p99_latency_s": 2.084, "tx_per_s_trolly": 300,
                                                 "ratio_to_kvstore": 0.3})
    assert record.headline(network) == [("tx_per_s_trolly", 300), ("ratio_to_kvstore", 0.3), ("p99_latency_s", 2.084)]
    other = kept("worker_overhead", True, {"nested": {"x": 1}, **{f"k{i}": i for i in range(10)}})
    assert record.headline(other) == [(f"k{i}", i) for i in range(record.MAX_COLUMNS)]


def test_the_table_has_a_row_per_benchmark_and_mode_sorted():
    table = record.render_table([kept("verification", False, {"replay_step_cost_ratio": 1.23456}),
                                 kept("fuzz_chain", True, {"txs": 10006, "crashes": 0}),
                                 kept("fuzz_chain", False, {"txs": 100039, "crashes": 0})])
    rows = table.splitlines()
    assert rows[0].startswith("| benchmark | mode |")
    assert [row.split("|")[1:3] for row in rows[2:]] == [
        [" `fuzz_chain` ", " full "], [" `fuzz_chain` ", " quick "], [" `verification` ", " full "]]
    assert "`replay_step_cost_ratio` 1.235" in rows[4] and "`abc1234`" in rows[4] and "| 1.50 |" in rows[4]


def test_only_the_text_between_the_markers_is_rewritten():
    rewritten = record.rewrite_section(DOCUMENT, "| new |")
    assert rewritten == DOCUMENT.replace("old table", "| new |")


@pytest.mark.parametrize("document", ["no markers", f"{END}\n{BEGIN}", f"{BEGIN}{BEGIN}{END}"])
def test_a_document_without_one_pair_of_markers_in_order_is_refused(document):
    with pytest.raises(RecordError, match="once each"):
        record.rewrite_section(document, "table")


def test_a_damaged_kept_line_is_named(tmp_path):
    (tmp_path / "broken.json").write_text("{\"benchmark\": ")
    with pytest.raises(RecordError, match="broken.json"):
        record.load_kept(tmp_path)


def test_the_real_performance_document_has_its_table_markers():
    text = (ROOT / "docs" / "performance.md").read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1


def run_record(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.record", *arguments], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def fake_benchmark():
    """A tiny module under benchmarks/ standing in for a benchmark (this test's own; removed afterwards)."""
    path = ROOT / "benchmarks" / "_record_test_fake.py"
    path.write_text("import json, sys\n"
                    "print('working', file=sys.stderr)\n"
                    "print('progress')\n"
                    "if '--fail' in sys.argv: sys.exit(3)\n"
                    "print(json.dumps({'quick': '--quick' in sys.argv, 'extra': sys.argv[1:], 'score': 7}))\n")
    yield "_record_test_fake"
    path.unlink()


def test_a_run_passes_its_output_through_keeps_its_line_and_rewrites_the_table(tmp_path, fake_benchmark):
    document = tmp_path / "performance.md"
    document.write_text(DOCUMENT)
    figures = tmp_path / "figures"
    done = run_record(fake_benchmark, "--quick", "--figures", str(figures), "--document", str(document),
                      "--", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert "progress" in done.stdout and "working" in done.stderr
    line = json.loads((figures / f"{fake_benchmark}.quick.json").read_text())
    assert line["result"] == {"quick": True, "extra": ["--quick", "--seed", "3"], "score": 7}
    assert line["benchmark"] == fake_benchmark and line["quick"] is True
    text = document.read_text()
    assert f"| `{fake_benchmark}` | quick | `quick` True," in text
    assert "old table" not in text and text.endswith("## Details\n\nProse stays.\n")


def test_a_failing_run_keeps_nothing_and_leaves_the_document(tmp_path, fake_benchmark):
    document = tmp_path / "performance.md"
    document.write_text(DOCUMENT)
    done = run_record(fake_benchmark, "--figures", str(tmp_path / "figures"), "--document", str(document),
                      "--", "--fail")
    assert done.returncode == 1
    assert "exited with code 3; nothing kept" in done.stderr
    assert not (tmp_path / "figures").exists()
    assert document.read_text() == DOCUMENT


def test_table_alone_regenerates_from_the_kept_lines(tmp_path):
    document = tmp_path / "performance.md"
    document.write_text(DOCUMENT)
    figures = tmp_path / "figures"
    figures.mkdir()
    line = kept("fuzz_chain", True, {"txs": 10006, "crashes": 0})
    line.path(figures).write_text(line.to_json())
    done = run_record("--table", "--figures", str(figures), "--document", str(document))
    assert done.returncode == 0, done.stderr
    assert document.read_text() == record.rewrite_section(DOCUMENT, record.render_table([line]))


@pytest.mark.parametrize("arguments, says", [
    ((), "give a benchmark's name, or --table alone"),
    (("verification", "--table"), "give a benchmark's name, or --table alone"),
    (("../etc/passwd",), "is not a benchmark module name"),
])
def test_bad_arguments_are_refused_with_a_reason(arguments, says):
    done = run_record(*arguments)
    assert done.returncode == 2 and says in done.stderr
