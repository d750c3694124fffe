"""A verifier that shares the agent's sandbox grades what the agent left, not what it
still does.

In Harbor's shared verifier mode the verifier runs in the agent's environment, right
after the agent. Left alone, a process the agent detached (`setsid`, `nohup`) would
still run then, and could rewrite `/logs/verifier/reward.json` behind the honest test;
files it left could hook the verifier's tools. So before verification starts, the
sandbox kills every process but its init and resets what the verifier's tools read
(`BwrapEnvironment.end_agent_phase`; `verification_reset.py` lists what, and what
stays). Separate verifier environments are fresh sandboxes and need nothing; the
agent's is stopped by then.

Harbor says when verification starts through a trial hook; the platform's trials
(`runtime/harbor_trials.py`) register it, and so must any other code that runs
`BwrapEnvironment` trials through Harbor's `Trial` directly.
"""

from __future__ import annotations

from harbor import Trial
from harbor.trial.hooks import TrialEvent, TrialHookEvent

from synth_pipelines.sandbox.bwrap import BwrapEnvironment


def isolate_verification(trial: Trial) -> None:
    """End the agent's phase in `trial`'s sandbox before its verifier runs there (and
    begin it again before a next step's agent)."""

    async def end_agent_phase(_event: TrialHookEvent) -> None:
        environment = trial.agent_environment
        if isinstance(environment, BwrapEnvironment) and environment.running:
            await environment.end_agent_phase()

    async def begin_agent_phase(_event: TrialHookEvent) -> None:
        environment = trial.agent_environment
        if isinstance(environment, BwrapEnvironment):
            environment.begin_agent_phase()

    trial.add_hook(TrialEvent.VERIFICATION_START, end_agent_phase)
    trial.add_hook(TrialEvent.AGENT_START, begin_agent_phase)
