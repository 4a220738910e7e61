"""docs/settings.md is what docs/settings_table.py generates from the classes that read the settings, and the
top-level settings stay few enough to hold in mind."""
import importlib.util
from pathlib import Path

from core.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("settings_table", ROOT / "docs" / "settings_table.py")
settings_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(settings_table)


def test_the_settings_page_is_the_generated_table():
    assert (ROOT / "docs" / "settings.md").read_text() == settings_table.markdown(), \
        "a setting changed: run `python docs/settings_table.py > docs/settings.md`"


def test_at_most_thirty_top_level_settings():
    assert len(Settings.model_fields) <= 30


def test_a_grouped_setting_under_its_old_name_is_refused_and_a_group_given_in_part_reads_the_rest(monkeypatch):
    import pytest

    monkeypatch.setenv("CKL_MAX_STEPS", "3")
    with pytest.raises(ValueError, match="CKL_MAX_STEPS is now CKL_TRAINING_MAX_STEPS"):
        Settings()
    monkeypatch.delenv("CKL_MAX_STEPS")
    monkeypatch.setenv("CKL_TRAINING_CHECK_EVERY", "5")
    settings = Settings(training={"max_steps": 3})
    assert (settings.training.max_steps, settings.training.check_every) == (3, 5)
    with pytest.raises(TypeError, match=r"max_steps \(now training.max_steps\)"):
        Settings(max_steps=3)
