"""Profiles: canonical identity, immutable versions, digests verified by every consumer."""

import json

import pytest
from sqlalchemy import update

from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile, ProfileDigestError
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import profile_versions
from synth_pipelines.registry.profiles import ProfileError, get_profile, list_profiles
from synth_pipelines.submission.profiles import publish_profile
from tests.conftest import PROJECT_ROOT


def _document(name: str = "claude-code.json") -> dict:
    return json.loads((PROJECT_ROOT / "profiles" / name).read_text())


def test_shipped_profiles_are_valid():
    for path in sorted((PROJECT_ROOT / "profiles").glob("*.json")):
        PinnedProfile.from_document(json.loads(path.read_text())).profile()


def test_identity_is_the_canonical_bytes_not_the_formatting():
    document = _document()
    reordered = dict(reversed(list(document.items())))
    assert PinnedProfile.from_document(document) == PinnedProfile.from_document(reordered)
    changed = {**document, "description": "another"}
    assert (
        PinnedProfile.from_document(changed).digest != PinnedProfile.from_document(document).digest
    )


def test_republishing_different_bytes_is_refused_and_identical_bytes_is_a_no_op(state):
    engine = control_engine(Settings())
    first, created = publish_profile(engine, _document(), "tester")
    again, created_again = publish_profile(engine, _document(), "tester")
    assert created and not created_again and first.pinned == again.pinned
    with pytest.raises(ProfileError, match="already published with digest"):
        publish_profile(engine, {**_document(), "args": ["--allowedTools", "Bash"]}, "tester")
    assert [p.pinned.digest for p in list_profiles(engine)] == [first.pinned.digest]


def test_digest_tampering_is_detected(state):
    engine = control_engine(Settings())
    published, _ = publish_profile(engine, _document(), "tester")
    altered = published.pinned.canonical.replace("Bash,Read,Edit,Write", "Bash")
    with pytest.raises(ProfileDigestError, match="was altered"):
        published.pinned.model_copy(update={"canonical": altered}).profile()
    with engine.begin() as conn:
        conn.execute(update(profile_versions).values(canonical=altered))
    with pytest.raises(ProfileError, match="is corrupt"):
        get_profile(engine, "synth/claude-code@1")


def test_an_experiment_keeps_the_version_it_selected(state):
    engine = control_engine(Settings())
    publish_profile(engine, _document(), "tester")
    selected = get_profile(engine, "synth/claude-code@1").pinned
    publish_profile(engine, {**_document(), "version": "2", "args": []}, "tester")
    assert get_profile(engine, "synth/claude-code@1").pinned == selected
    assert selected.profile().args == ["--allowedTools", "Bash,Read,Edit,Write"]


def test_secret_literals_and_bad_paths_are_refused():
    with pytest.raises(ValueError, match="looks like a secret"):
        PinnedProfile.from_document(
            {**_document(), "env": [{"name": "GITHUB_TOKEN", "value": "x"}]}
        )
    with pytest.raises(ValueError, match=r"without '\.\.'"):
        PinnedProfile.from_document({**_document(), "files": [{"path": "../x", "content": ""}]})
    bound = PinnedProfile.from_document(
        {**_document(), "env": [{"name": "MY_TOKEN", "bind": "token"}]}
    )
    assert bound.profile().env[0].bind == "token"
