"""Runs launched through the gateway are the launching key's owner's.

A GraphQL request on its way to the Dagster webserver has, in each mutation that launches
runs, the argument that carries the new runs' tags taken out into a variable of its own
(whether the client wrote it inline or as a variable) with the owner tag set in it to the
key's owner, whatever the client sent. Dagster's own tags merge below the launch's, so
that owner is the run's.

A backfill that is retried or resumed (`reexecutePartitionBackfill`,
`resumePartitionBackfill`) keeps the tags of the backfill it continues, owner included:
Dagster takes no tags for it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from graphql import (
    ArgumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    InlineFragmentNode,
    NameNode,
    Node,
    OperationDefinitionNode,
    SelectionSetNode,
    Undefined,
    VariableDefinitionNode,
    VariableNode,
    parse,
    parse_type,
    print_ast,
    value_from_ast_untyped,
)

from synth_pipelines.contracts.dagster_tags import OWNER_TAG

Owned = Callable[[Any, str], Any]
"""An argument's value with the owner tag set in it."""


class UnownableLaunchError(ValueError):
    """A launch written where its owner cannot be set: the message says how to write it."""


def _tags(tags: Any, owner: str) -> Any:
    # GraphQL takes a single item for a list: the client may send one tag bare.
    listed = [tags] if isinstance(tags, dict) else tags or []
    if not isinstance(listed, list):
        return tags
    kept = [tag for tag in listed if not (isinstance(tag, dict) and tag.get("key") == OWNER_TAG)]
    return [*kept, {"key": OWNER_TAG, "value": owner}]


def _execution(params: Any, owner: str) -> Any:
    if not isinstance(params, dict):
        return params
    metadata = params.get("executionMetadata") or {}
    if isinstance(metadata, dict):
        params["executionMetadata"] = {**metadata, "tags": _tags(metadata.get("tags"), owner)}
    return params


def _executions(listed: Any, owner: str) -> Any:
    items = [listed] if isinstance(listed, dict) else listed
    return [_execution(item, owner) for item in items] if isinstance(items, list) else listed


def _reexecution(params: Any, owner: str) -> Any:
    if isinstance(params, dict):
        params["extraTags"] = _tags(params.get("extraTags"), owner)
    return params


def _backfill(params: Any, owner: str) -> Any:
    if isinstance(params, dict):
        params["tags"] = _tags(params.get("tags"), owner)
    return params


_RUN: dict[str, tuple[str, Owned]] = {"executionParams": ("ExecutionParams!", _execution)}
_REEXECUTION: dict[str, tuple[str, Owned]] = {
    "executionParams": ("ExecutionParams", _execution),
    "reexecutionParams": ("ReexecutionParams", _reexecution),
}
LAUNCHES: dict[str, dict[str, tuple[str, Owned]]] = {
    "launchRun": _RUN,
    "launchPipelineExecution": _RUN,
    "launchMultipleRuns": {"executionParamsList": ("[ExecutionParams!]!", _executions)},
    "launchRunReexecution": _REEXECUTION,
    "launchPipelineReexecution": _REEXECUTION,
    "launchPartitionBackfill": {"backfillParams": ("LaunchBackfillParams!", _backfill)},
}
"""Each launching mutation (Dagster 1.13's schema): its arguments that carry the new
runs' tags, with their declared type and where the tags are in them."""


def _launches(selections: SelectionSetNode | None) -> list[FieldNode]:
    found: list[FieldNode] = []
    for selection in selections.selections if selections else ():
        if isinstance(selection, FieldNode) and selection.name.value in LAUNCHES:
            found.append(selection)
        elif isinstance(selection, FieldNode | InlineFragmentNode):
            found += _launches(selection.selection_set)
    return found


def _free_name(taken: set[str]) -> str:
    number = len(taken)
    while f"synthOwned{number}" in taken:
        number += 1
    taken.add(f"synthOwned{number}")
    return f"synthOwned{number}"


def _variables_in(node: Any) -> set[str]:
    """The variables `node` uses (its own definitions of them aside)."""
    if isinstance(node, VariableNode):
        return {node.name.value}
    if isinstance(node, tuple | list):
        return set().union(*(_variables_in(item) for item in node))
    if isinstance(node, Node):
        return _variables_in([getattr(node, k) for k in node.keys if k != "variable_definitions"])
    return set()


def _own_arguments(
    field: FieldNode, variables: dict[str, Any], owned: dict[str, Any], taken: set[str], owner: str
) -> list[VariableDefinitionNode]:
    """Set the owner in `field`'s tag-bearing arguments; the variables that adds."""
    added: list[VariableDefinitionNode] = []
    arguments: list[ArgumentNode] = []
    for argument in field.arguments or ():
        declared = LAUNCHES[field.name.value].get(argument.name.value)
        if declared is not None:
            type_name, set_owner = declared
            value = value_from_ast_untyped(argument.value, variables)
            # A variable the client did not send is null, which the webserver refuses
            # for a required argument as it would have.
            value = set_owner(None if value is Undefined else copy.deepcopy(value), owner)
            if isinstance(argument.value, VariableNode):
                owned[argument.value.name.value] = value
            else:
                # Written inline: the whole value becomes a variable, the one place
                # the tags are set.
                variable = VariableNode(name=NameNode(value=_free_name(taken)))
                owned[variable.name.value] = value
                added.append(
                    VariableDefinitionNode(
                        variable=variable, type=parse_type(type_name), directives=()
                    )
                )
                argument = ArgumentNode(name=argument.name, value=variable)
        arguments.append(argument)
    field.arguments = tuple(arguments)
    return added


def owned_launches(
    query: str, variables: dict[str, Any], owner: str
) -> tuple[str, dict[str, Any]] | None:
    """The query and variables with every launch's owner tag set to `owner`; None when the
    query launches nothing (or does not parse, which the webserver refuses in turn)."""
    try:
        document = parse(query)
    except GraphQLError:
        return None
    fragments = [d for d in document.definitions if isinstance(d, FragmentDefinitionNode)]
    for fragment in fragments:
        if _launches(fragment.selection_set):
            raise UnownableLaunchError(
                f"{fragment.name.value}: write a launching mutation in the operation itself, "
                "not in a fragment: the gateway sets the launched runs' owner there"
            )
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    owned = dict(variables)
    taken = set(owned) | {
        definition.variable.name.value
        for operation in operations
        for definition in operation.variable_definitions or ()
    }
    launched = False
    for operation in operations:
        added: list[VariableDefinitionNode] = []
        for field in _launches(operation.selection_set):
            launched = True
            added += _own_arguments(field, variables, owned, taken, owner)
        # Variables used only inside a value now sent whole would be unused, which
        # GraphQL refuses: their definitions go.
        used = _variables_in([operation, fragments])
        operation.variable_definitions = tuple(
            definition
            for definition in (*(operation.variable_definitions or ()), *added)
            if definition.variable.name.value in used
        )
    return (print_ast(document), owned) if launched else None
