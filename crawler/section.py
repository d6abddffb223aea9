"""The base of every settings section (crawler/config.py and the sections its components own).

One way to check a value for all of them: strict types (a string is not a number, `true` is not
an integer), finite floats, and unknown keys are errors (reported with the closest known key of
the table, `crawler.config.one_line`), so a typo or a wrong type never falls back to a default
or is coerced. Frozen, so a component cannot change the settings it was given. Every field has
a `description` and every section's docstring names its table and says what it is for: the
configuration reference is generated from them. A leaf module (pydantic only) that the
components' settings import without a cycle.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A table of the settings: strict, closed to unknown keys, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
