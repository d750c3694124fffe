"""Claude Code-shaped request bodies; the benchmarks own them and the tests replay the same."""

from benchmarks.claude_code_requests import (
    first_request,
    grown_conversation,
    tool_result_request,
    tool_round_trip,
)

__all__ = ["first_request", "grown_conversation", "tool_result_request", "tool_round_trip"]
