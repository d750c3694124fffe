"""The production configuration files load, and point where the deployment needs them."""

import dagster as dg
import yaml
from dagster._config import process_config
from dagster._core.run_coordinator import QueuedRunCoordinator
from dagster._core.workspace.config_schema import WORKSPACE_CONFIG_SCHEMA
from dagster_aws.s3.compute_log_manager import S3ComputeLogManager
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from tests.conftest import PROJECT_ROOT


def test_production_instance_stores_runs_events_and_schedules_in_postgresql(production_env):
    with dg.DagsterInstance.from_config(str(production_env.dagster_home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        instance.add_dynamic_partitions("runs", ["r-config-check"])
    with dg.DagsterInstance.from_config(str(production_env.dagster_home)) as reopened:
        assert reopened.get_dynamic_partitions("runs") == ["r-config-check"]


def test_production_instance_ships_step_logs_to_the_bucket(production_env):
    with dg.DagsterInstance.from_config(str(production_env.dagster_home)) as instance:
        assert isinstance(instance.compute_log_manager, S3ComputeLogManager)
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        assert instance.run_monitoring_enabled
        with instance.compute_log_manager.capture_logs(["config-check", "step"]):
            print("a line a step printed", flush=True)
    keys = production_env.s3.keys(production_env.bucket, "dagster/compute-logs/")
    (stdout,) = [key for key in keys if "config-check" in key and key.endswith(".out")]
    body = production_env.s3.client().get_object(Bucket=production_env.bucket, Key=stdout)
    assert b"a line a step printed" in body["Body"].read()


def test_production_workspace_loads_definitions_from_a_code_server(production_env):
    document = yaml.safe_load((PROJECT_ROOT / "workspace.production.yaml").read_text())
    result = process_config(WORKSPACE_CONFIG_SCHEMA, document)
    assert result.success, result.errors
    (location,) = result.value["load_from"]
    assert set(location) == {"grpc_server"}
    assert location["grpc_server"]["location_name"] == "synth_pipelines"
