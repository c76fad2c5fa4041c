"""A Wool application for the tests: its routines travel by module and name, so the worker
imports this module (``--import sleepy_app``) from the same path as the client."""

import asyncio

import wool


@wool.routine
async def nap(seconds: float) -> float:
    """Sleep ``seconds`` on the worker, then return them."""
    await asyncio.sleep(seconds)
    return seconds
