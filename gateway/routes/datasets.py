"""Dataset versions: upload grants for their task packages, the commit that records a
version once its packages are stored, and reading versions back.

Publishing never moves a package through here: the grants route signs one grant per
package (`gateway.upload_grants`) with a URL its bytes are PUT to (the S3 store's own,
presigned; or, for a local store, `gateway.routes.uploads`, which streams them to disk),
and the commit checks each granted object in the store before recording the version as
the key's owner's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Request

from gateway.auth import Operator, Viewer
from gateway.openapi import refusals
from gateway.state import GatewayState, State
from gateway.upload_grants import sign_grant, verify_grant
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.dataset import DatasetVersion, TaskRef, dataset_digest
from synth_pipelines.contracts.documents import DatasetWithTasks, PublishedDataset
from synth_pipelines.contracts.refs import check_name, check_version
from synth_pipelines.contracts.upload_grant import (
    DatasetCommit,
    GrantClaims,
    GrantRequest,
    PackageGrant,
    UploadGrants,
)
from synth_pipelines.control.table_outputs import current_table_ref
from synth_pipelines.registry.datasets import (
    DatasetError,
    DatasetNotFoundError,
    get_dataset,
    list_datasets,
    published_as,
    read_page,
    record_dataset,
)
from synth_pipelines.registry.task_packages import package_key
from synth_pipelines.storage.objectstore import S3ObjectStore

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post("/grants", response_model=UploadGrants, responses=refusals(400, 403))
def grants(body: GrantRequest, key: Operator, state: State, request: Request) -> UploadGrants:
    """One upload grant per task package of `name@version`, in order, for the key's owner:
    a URL to PUT the package to (none when the store already holds it), create-only and
    bound to its SHA-256 and size, and the signed grant the commit hands back."""
    ref = f"{body.name}@{body.version}"
    try:
        check_name(body.name, "dataset")
        check_version(body.version, "dataset")
        digest = dataset_digest([(task.name, task.digest) for task in body.tasks])
        published = published_as(state.engine, body.name, body.version, digest) is not None
    except (DatasetError, ValueError) as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    expires_at = datetime.now(UTC) + timedelta(seconds=state.config.upload_grant_sec)
    issued = []
    for task in body.tasks:
        claims = GrantClaims(
            owner=key.owner,
            dataset=ref,
            task=task.name,
            digest=task.digest,
            key=package_key(task.digest),
            sha256=task.sha256,
            size=task.size,
            expires_at=expires_at,
        )
        grant = sign_grant(state.config.key_secret, claims)
        needed = not published and not _stored(state, claims)
        url, headers = _upload(state, request, claims, grant) if needed else (None, {})
        issued.append(
            PackageGrant(
                task=task.name,
                key=claims.key,
                sha256=claims.sha256,
                size=claims.size,
                url=url,
                headers=headers,
                grant=grant,
                expires_at=expires_at,
            )
        )
    return UploadGrants(published=published, grants=issued)


@router.post("", response_model=PublishedDataset, responses=refusals(400, 403))
def commit(body: DatasetCommit, key: Operator, state: State) -> PublishedDataset:
    """Record `name@version` as its grants' packages, in order, once each is in the store
    with its granted SHA-256; owned by the key's owner. Identical content again answers
    the recorded version (`created` false); other content under it is refused."""
    ref = f"{body.name}@{body.version}"
    tasks = []
    for position, grant in enumerate(body.grants):
        claims = verify_grant(state.config.key_secret, grant)
        if claims.owner != key.owner:
            raise ApiError(
                "permission_error",
                f"grant {position} (task {claims.task}) was issued to another owner; "
                "ask for your own with your key",
            )
        if claims.dataset != ref:
            raise ApiError(
                "invalid_request_error",
                f"grant {position} (task {claims.task}) is for {claims.dataset}, not {ref}",
            )
        tasks.append(
            TaskRef(
                position=position,
                name=claims.task,
                digest=claims.digest,
                package_key=claims.key,
                package_sha256=claims.sha256,
            )
        )
    try:
        dataset, created = record_dataset(
            state.engine,
            state.store,
            body.name,
            body.version,
            key.owner,
            body.description,
            tasks,
        )
    except DatasetError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    if created:
        _report(state, dataset)
    return PublishedDataset(**dataset.model_dump(), created=created)


@router.get("", response_model=list[DatasetVersion], responses=refusals())
def list_(_key: Viewer, state: State) -> list[DatasetVersion]:
    """Every published dataset version, by name, oldest first."""
    return list_datasets(state.engine)


@router.get("/{ref:path}", response_model=DatasetWithTasks, responses=refusals(400, 404))
def show(ref: str, _key: Viewer, state: State) -> DatasetWithTasks:
    """A version (`org/name@version`) and its tasks, in order, with their digests."""
    try:
        dataset = get_dataset(state.engine, ref)
    except DatasetNotFoundError as missing:
        raise ApiError("not_found_error", str(missing)) from None
    except DatasetError as refused:
        raise ApiError("invalid_request_error", str(refused)) from None
    tasks = read_page(state.engine, dataset, 0, dataset.task_count)
    return DatasetWithTasks(**dataset.model_dump(), tasks=tasks)


def _stored(state: GatewayState, claims: GrantClaims) -> bool:
    """Whether the store already holds the package (another version shares the task);
    a different object under its key is refused, since the version could never read it."""
    held = state.store.head(claims.key)
    if held is None:
        return False
    if held.sha256 != claims.sha256:
        raise ApiError(
            "invalid_request_error",
            f"task {claims.task}: the store holds its package {claims.key} with sha256 "
            f"{held.sha256}, not {claims.sha256}; the same task packs to other bytes here, "
            "so publish it with the platform version that packed it",
        )
    return True


def _upload(
    state: GatewayState, request: Request, claims: GrantClaims, grant: str
) -> tuple[str, dict[str, str]]:
    """Where the package's bytes go: an S3 store's presigned PUT, else the gateway's own
    upload route, which streams them to the local store."""
    if isinstance(state.store, S3ObjectStore):
        return state.store.presigned_put(claims.key, claims.sha256, state.config.upload_grant_sec)
    return str(request.url_for("upload_package", grant=grant)), {}


def _report(state: GatewayState, dataset: DatasetVersion) -> None:
    """Tell Dagster of the new version: its `dataset_tasks` partition, with lineage."""
    from resources.dagster_instance import report_dataset_published

    table = current_table_ref(state.engine, "dataset_tasks", dataset.ref)
    assert table is not None, "record_dataset stores the version's task table"
    report_dataset_published(state.config.dagster_home, dataset, table, state.store.uri(table.key))
