"""Cross-fitting phi (issue 23's data rule): the folds, the checkpoint's manifest, and the benchmark's guard
that no phi weighs a TO-LEARN row it was meta-trained on; on the tiny model and a small LAMA-ckl folder."""
import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.lama_ckl import phis, run
from core.scoring import Probe
from research import lama_ckl
from research.train_attention import cli as train_cli
from research.train_attention import folds, training
from research.train_attention.config import TrainConfig
from research.train_attention.rows import DataRule, select_variant, uuids_digest, variant_pool
from tests.tiny import tiny_loaded
from workers.train_attention import phi

TINY = TrainConfig(steps=2, batch=2, val=2, val_outer=1, validate_every=1, checkpoint_every=1, max_tokens=32)
SUBJECTS = ["france", "germany", "italy", "veltoria", "marnhold", "tower"]


def fake_rows(n: int, objects: list[str], relations: list[str]) -> list[lama_ckl.Row]:
    return [lama_ckl.Row(f"u{i:02d}", "", objects[i % len(objects)], Probe("", ""), relations[i // len(objects) % 2])
            for i in range(n)]


def test_folds_by_uuid_hold_every_row_once_whatever_the_order():
    rows = fake_rows(23, ["paris", "rome", "berlin"], ["capital", "maker"])
    k = folds.make_folds(rows, 4, "uuid", seed=7)
    assert sorted(r.uuid for fold in k for r in fold) == sorted(r.uuid for r in rows)  # each uuid exactly once
    assert {len(fold) for fold in k} == {5, 6}
    assert k == folds.make_folds(rows[::-1], 4, "uuid", seed=7)
    assert k != folds.make_folds(rows, 4, "uuid", seed=8)
    assert folds.fold_index(k) == {r.uuid: i for i, fold in enumerate(k) for r in fold}
    with pytest.raises(ValueError, match="one row per uuid"):
        folds.make_folds(rows + rows[:1], 4, "uuid", seed=7)


def test_folds_by_group_never_split_a_relation_and_answer():
    rows = fake_rows(40, ["paris", "rome", "berlin", "italy", "veltoria"], ["capital", "maker"])
    k = folds.make_folds(rows, 3, "group", seed=0)
    assert sorted(r.uuid for fold in k for r in fold) == sorted(r.uuid for r in rows)
    fold_of_group = {}
    for i, fold in enumerate(k):
        for row in fold:
            assert fold_of_group.setdefault(folds.group_key(row), i) == i
    assert max(map(len, k)) - min(map(len, k)) <= 4  # groups of 4: as even as whole groups allow
    assert k == folds.make_folds(rows[::-1], 3, "group", seed=0)
    with pytest.raises(ValueError, match="need 2 to 10"):
        folds.make_folds(rows, 11, "group", seed=0)


def test_the_held_out_fold_is_what_the_rest_does_not_train_on():
    pool = fake_rows(12, ["paris", "rome", "berlin"], ["capital", "maker"])
    assert select_variant(pool, DataRule()) == ([], [])
    assert select_variant(pool, DataRule("with-variant")) == (pool, [])
    k = folds.make_folds(pool, 3, "group", seed=0)
    for i in range(3):
        trained, held_out = select_variant(pool, DataRule("with-variant", 3, i, "group"))
        assert held_out == k[i] and {r.uuid for r in trained} == {r.uuid for r in pool} - {r.uuid for r in k[i]}
    with pytest.raises(ValueError, match="with-variant"):
        DataRule("paper", folds=3)
    with pytest.raises(ValueError, match="0..2"):
        DataRule("with-variant", 3, 3)


# -- on the tiny model -----------------------------------------------------------------------------
def jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def lama_row(uuid: str, subject: str, relation: str, obj: str) -> dict:
    sentence = f"the {relation} of {subject} is {obj} ."
    return {"uuid": uuid, "evidence": f"a city in {subject} . {sentence}", "object": obj,
            "task_descriptive": sentence, "relation_label": relation}


@pytest.fixture(scope="module")
def lama(tmp_path_factory):
    """A LAMA-ckl folder (12 variant rows in 6 groups, 2 x 8 invariant rows sharing 4), its tailoring cache
    (invariant i0-i5 known: the NF pool), and three phis: the paper's protocol, all of variant_dev, and
    a checkpoint with no uuids at all."""
    root = tmp_path_factory.mktemp("lama")
    data, results = root / "data", root / "results"
    data.mkdir()
    variant = [lama_row(f"v{i:02d}", SUBJECTS[i % 6], ["capital", "maker"][i % 2], ["paris", "rome", "berlin"][i % 3])
               for i in range(12)]
    invariant = [lama_row(f"i{i}", SUBJECTS[i % 6], "capital", ["italy", "germany"][i % 2]) for i in range(12)]
    jsonl(data / "variant_dev.jsonl", variant)
    jsonl(data / "invariant_descriptive.jsonl", invariant[:8])
    jsonl(data / "invariant_schematic.jsonl", invariant[4:])
    cache = lama_ckl.tailoring_cache(results, "tiny", lama_ckl.data_files(data))
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({**{r["uuid"]: 0.0 for r in variant},
                                 **{r["uuid"]: float(i < 6) for i, r in enumerate(invariant)}}))
    made = {}
    for name, rule in [("paper", DataRule()), ("all", DataRule("with-variant"))]:
        made[name] = root / "phis" / name
        training.train_and_save(tiny_loaded(), TINY, rule, data, results / "train-attention" / name, results, "tiny",
                                made[name], f"test {name}")
    loaded = tiny_loaded()
    made["bare"] = root / "phis" / "bare"
    phi.save_checkpoint(made["bare"], phi.make_head(phi.default_config(loaded.model)),
                        {"base_model": phi.fingerprint(loaded.model)})
    return {"data": data, "results": results, "phis": made, "nf": {f"i{i}" for i in range(6)}}


def manifest(path: Path) -> dict:
    return json.loads(path.with_suffix(".json").read_text())


def test_the_manifest_names_the_data_files_the_rule_and_the_folds(lama, tmp_path):
    data, results = lama["data"], lama["results"]
    sha = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in lama_ckl.data_files(data)}
    paper = manifest(lama["phis"]["paper"])["data"]
    assert paper["protocol"] == "paper" and "variant_dev" not in paper
    assert paper["files"] == {k: v for k, v in sha.items() if k != "variant_dev.jsonl"}
    assert not any(u.startswith("v") for u in paper["train_uuids"])

    rule = DataRule("with-variant", folds=3, hold_out=1, split="group", fold_seed=5)
    training.train_and_save(tiny_loaded(), TINY, rule, data, results / "train-attention" / "fold1", results, "tiny",
                            tmp_path / "fold1", "test fold")
    saved = manifest(tmp_path / "fold1")
    record, fold = saved["data"], saved["data"]["variant_dev"]
    assert record["files"] == sha and record["protocol"] == "with-variant" and saved["train"] == asdict(TINY)
    assert (fold["folds"], fold["hold_out"], fold["split"], fold["fold_seed"]) == (3, 1, "group", 5)
    pool = variant_pool(data)
    held = [r.uuid for r in folds.make_folds(pool, 3, "group", 5)[1]]
    assert fold["held_out_uuids"] == held and fold["pool_rows"] == 12 and fold["trained_rows"] == 12 - len(held)
    trained = set(record["train_uuids"])
    assert trained.isdisjoint(held) and trained.isdisjoint(lama["nf"]) and trained.isdisjoint(record["val_uuids"])
    assert {r.uuid for r in pool} - set(held) <= trained
    assert len(record["train_uuids"]) == len(trained) == record["train_pairs"]  # the shared invariant rows once
    assert len(set(record["val_uuids"])) == len(record["val_uuids"]) == record["val_pairs"]
    assert fold["trained_uuids_sha256"] == uuids_digest([r for r in pool if r.uuid not in held])


def bench(lama, monkeypatch, assign, **checkpoints):
    """A LAMA-ckl run on the tiny model of one method per named phi (taalm-NAME), with `assign`."""
    for name, path in checkpoints.items():
        monkeypatch.setitem(run.METHODS, f"taalm-{name}", run.MethodSpec("adapter", "train_attention", 3e-4,
                                                                         phi_checkpoint=str(path)))
    data = lama["data"]
    variant, invariant = lama_ckl.read_pools(data)
    config = run.Config(methods=[f"taalm-{n}" for n in checkpoints], to_learn=6, nf=2, epochs=1, batch_size=4,
                        max_tokens=32, model="tiny")
    cache = lama_ckl.tailoring_cache(lama["results"], "tiny", lama_ckl.data_files(data))
    return run.run_benchmark(config, tiny_loaded, variant, invariant, cache, "tiny", assign)


def test_the_guard_refuses_a_phi_trained_on_an_evaluated_row(lama, monkeypatch):
    with pytest.raises(SystemExit, match="meta-trained on 6 of the 6 TO-LEARN rows.*--crossfit"):
        bench(lama, monkeypatch, phis.as_is, paper=lama["phis"]["paper"], all=lama["phis"]["all"])
    variant, invariant = lama_ckl.read_pools(lama["data"])
    spec = run.MethodSpec("adapter", "train_attention", 3e-4, phi_checkpoint=str(lama["phis"]["all"]))
    with pytest.raises(SystemExit, match="meta-trained on 3 of the 3"):  # run_method called on its own
        run.run_method("taalm-all", run.Config(model="tiny"), tiny_loaded, variant[:3], invariant[:2], spec=spec)
    results = bench(lama, monkeypatch, phis.as_is, paper=lama["phis"]["paper"], bare=lama["phis"]["bare"])
    assert [m["phis"] for m in results["methods"]] == [{str(lama["phis"]["paper"]): 6}, {str(lama["phis"]["bare"]): 6}]


def test_a_crossfitted_run_weighs_each_row_with_the_phi_that_never_saw_it(lama, monkeypatch):
    crossfit = phis.CrossFit(3, "group", 0, lama["data"], lama["results"], tiny_loaded, "tiny")
    results = bench(lama, monkeypatch, crossfit, paper=lama["phis"]["paper"], all=lama["phis"]["all"])
    paper, crossfitted = results["methods"]
    assert paper["phis"] == {str(lama["phis"]["paper"]): 6}  # the paper's protocol beside, as it is
    evaluated = [r for r in variant_pool(lama["data"]) if r.uuid in results["tailoring"]["to_learn_uuids"]]
    assignment = crossfit(lama["phis"]["all"], evaluated)
    assert {str(p): n for p, n in phis.summary(assignment).items()} == crossfitted["phis"]
    assert len(set(assignment.values())) > 1
    for uuid, checkpoint in assignment.items():
        made = manifest(checkpoint)
        assert uuid in made["data"]["variant_dev"]["held_out_uuids"] and uuid not in phis.seen_uuids(checkpoint)
        packaged = manifest(lama["phis"]["all"])["train"]  # the packaged phi's training, a fold less, validated once
        assert made["train"] == {**packaged, "validate_every": packaged["steps"]}
    # A second run finds the fold phis in the cache instead of training them again.
    stamps = {c: c.with_suffix(".safetensors").stat().st_mtime_ns for c in set(assignment.values())}
    assert crossfit(lama["phis"]["all"], evaluated) == assignment
    assert stamps == {c: c.with_suffix(".safetensors").stat().st_mtime_ns for c in stamps}


def test_the_command_lines_refuse_folds_without_their_rule_before_loading_a_model(capsys):
    from bench.lama_ckl import cli

    for main, argv, message in [
            (train_cli.main, ["--folds", "3"], "need the with-variant rule"),
            (train_cli.main, ["--rule", "with-variant", "--folds", "3", "--hold-out", "3"], "one of 0..2"),
            (cli.main, ["--split", "group"], "go with --crossfit"),
            (cli.main, ["--crossfit", "1"], "at least 2 folds")]:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("checkpoint", sorted(p.with_suffix("") for p in phi.CHECKPOINTS.glob("*.json")),
                         ids=lambda p: p.name)
def test_each_packaged_phi_names_its_data_and_keeps_to_its_rule(checkpoint, lama_dir):
    """Against the data it names: the sha256 of the files it read, each uuid a row of them, trained or validated
    on once (the invariant files share rows), never both, validated on invariant rows only, and the digests
    it records. The paper's protocol: no variant_dev row. The new rule's packaged phi: every variant_dev row,
    no fold held out (NF rows stay out: the tiny model's manifest test above)."""
    data = manifest(checkpoint)["data"]
    files = lama_ckl.data_files(lama_dir)
    variant = {r.uuid for r in variant_pool(lama_dir)}
    invariant = {r.uuid for r in lama_ckl.read_invariant(lama_dir)}
    train, val = data["train_uuids"], data["val_uuids"]
    trained = set(train) | set(val)
    for f in files[1:]:
        assert data["files"][f.name] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert len(set(train)) == len(train) == data["train_pairs"] and len(set(val)) == len(val) == data["val_pairs"]
    assert set(train).isdisjoint(val) and set(val) <= invariant and trained <= invariant | variant
    assert data["train_uuids_sha256"] == uuids_digest([SimpleNamespace(uuid=u) for u in train])
    assert data["val_uuids_sha256"] == uuids_digest([SimpleNamespace(uuid=u) for u in val])
    if data.get("protocol", "paper") == "paper":
        assert trained.isdisjoint(variant)
    else:
        assert data["files"][files[0].name] == hashlib.sha256(files[0].read_bytes()).hexdigest()
        assert data["variant_dev"]["folds"] == 0 and data["variant_dev"]["held_out_uuids"] == []
        assert variant <= set(data["train_uuids"])
