"""The stage registry (sciencemap.stages) is filled from the installed entry points."""
from __future__ import annotations

import pytest

from sciencemap.runtime import UserError
from sciencemap.stages import Stage, StageContext, all_stages, get_stage, pipeline_stages

PIPELINE = ["ingest", "importance", "train", "embed", "knn", "cluster", "render", "evaluate"]


def test_entry_points_give_the_eight_pipeline_stages_in_order():
    assert [s.name for s in pipeline_stages()] == PIPELINE
    assert all(isinstance(s, Stage) for s in all_stages())
    orders = [s.order for s in pipeline_stages()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    # the corpus generator is a job of its own, not a pipeline stage
    assert not get_stage("generate").in_pipeline and "generate" not in [s.name for s in pipeline_stages()]
    assert {s.name for s in all_stages() if s.creates_run} == {"ingest", "generate"}


def test_each_stage_names_its_own_config_and_summary():
    for s in pipeline_stages():
        assert s.config.__module__.split(".")[0] in ("importance", "encoders", "mapping"), s.name
        assert s.summary, s.name


def test_unknown_stage_is_a_user_error():
    with pytest.raises(UserError, match="unknown stage 'embedd'.*embed"):
        get_stage("embedd")


def test_context_makes_a_shared_resource_once_and_closes_it():
    made, closed = [], []
    with StageContext() as ctx:
        a = ctx.shared("res", lambda: made.append(1) or object(), close=closed.append)
        assert ctx.shared("res", lambda: made.append(2) or object()) is a
        assert made == [1] and closed == []
    assert closed == [a]
