"""The recall bench's variants (`scripts/bench_recall.py --variants`): what the product lets a
caller set, i.e. `EpisodicMemory`'s keyword arguments and the forge's ranking configuration
(`tenancy.ranking.Ranking`: any field as `+name=value`, a named preset as `+preset=name`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.recall_windows import Window
from memory_bridge.tenancy.ranking import Ranking, partial, preset

__all__ = ["DEFAULT_VARIANTS", "PRODUCT", "Variant", "parse_variants"]


@dataclass(frozen=True, slots=True)
class Variant:
    """None: the product's default (the keyword argument is not passed)."""

    name: str
    dense: float | None = None
    sparse: float | None = None
    context: bool | None = None
    dated: bool = False
    apply: str = "both"  # where the weights apply: "both", "engine" (only), "forge" (only)
    preset: str = "default"  # a named preset of the ranking configuration
    depth: int | None = None  # candidates recall hands the forge (`EpisodicMemory`'s `depth`)
    window: Window | None = None  # what a message is indexed with (`bench.recall_windows`)
    prf: int = 0  # words of pseudo-relevance feedback (`bench.recall_prf`), 0: none
    prf_weight: float = 0.5  # the feedback search's weight in the sparse ranks
    # Fields of the ranking configuration (snake or camel names) -> values.
    ranking: tuple[tuple[str, float | bool], ...] = ()

    @property
    def index_key(self) -> tuple[bool | None, bool, Window | None]:
        return (self.context, self.dated, self.window)

    def describe(self) -> str:
        extra = f", preset {self.preset}" if self.preset != "default" else ""
        extra += f", {self.depth} candidates" if self.depth is not None else ""
        extra += f", indexed in {self.window}" if self.window is not None else ""
        extra += f", feedback {self.prf} words at {self.prf_weight:g}" if self.prf else ""
        extra += "".join(f", {k}={v}" for k, v in self.ranking)
        if self.dense is None:
            dated = ", stored at the sessions' dates" if self.dated else ""
            return "product defaults (no setting passed)" + dated + extra
        return self._weights() + extra

    def _weights(self) -> str:
        context = {None: "default", True: "in context", False: "plain"}[self.context]
        where = "" if self.apply == "both" else f" ({self.apply} only)"
        dated = ", stored at the sessions' dates" if self.dated else ""
        return f"BM25 {context}, dense/sparse {self.dense:g}/{self.sparse:g}{where}{dated}"

    def rank_config(self) -> Ranking:
        """The forge's configuration of this variant: the product's, with its preset, its
        dense/sparse weights (for episodic candidates, as the product's default sets them) and
        its named fields."""
        config = preset(self.preset)
        update: dict[str, Any] = dict(self.ranking)
        if self.apply != "engine" and self.dense is not None and self.sparse is not None:
            episodic = {"dense": self.dense, "sparse": self.sparse}
            update.update(dense_weight=self.dense, sparse_weight=self.sparse)
            update["source_weights"] = {"episodic": episodic}
        return config.updated(partial(update)) if update else config


PRODUCT = Variant("product")
_SPEC = re.compile(r"(ctx|plain)-([0-9.]+)/([0-9.]+)(-engine|-forge)?(-dated)?")
_SETTING = re.compile(r"([A-Za-z_]+)=([A-Za-z0-9_.]+)")
DEFAULT_VARIANTS = (
    "ctx-1/1,ctx-0.5/1,plain-1/1,plain-0.5/1,ctx-0/1,ctx-1/0,ctx-1/1-dated,ctx-0.5/1-dated"
)


def parse_variants(spec: str) -> list[Variant]:
    """`product` (always first) plus e.g. "ctx-0.5/1", "plain-1/1", "ctx-1/1-dated";
    "-engine" / "-forge" apply the weights to the engine's fusion or the forge's rank only;
    "+name=value" sets a field of the ranking configuration, "+preset=name" a named preset,
    "+depth=N" how many candidates recall hands the forge, "+before=N", "+after=N",
    "+across=true", "+own=N", "+decay=true" what a message is indexed with (`bench.recall_windows`)
    (e.g. "product+preset=keyword", "ctx-1/1+recencyWeight=0"); "product-dated" is the
    product with the messages stored at their sessions' dates."""
    out = [PRODUCT]
    for part in (p.strip() for p in spec.split(",")):
        if not part or part == "product":
            continue
        head, *settings = part.split("+")
        if head in ("product", "product-dated"):
            base = dataclasses.replace(PRODUCT, dated=head.endswith("-dated"))
            out.append(_with_settings(base, part, settings))
            continue
        match = _SPEC.fullmatch(head)
        if match is None:
            raise ValueError(
                f"variant {part!r}: want [ctx|plain]-<dense>/<sparse>[-engine|-forge][-dated]"
            )
        variant = Variant(
            part,
            dense=float(match.group(2)),
            sparse=float(match.group(3)),
            context=match.group(1) == "ctx",
            dated=bool(match.group(5)),
            apply=(match.group(4) or "-both")[1:],
        )
        out.append(_with_settings(variant, part, settings))
    return out


def _with_settings(variant: Variant, name: str, settings: Sequence[str]) -> Variant:
    chosen = variant.preset
    depth = variant.depth
    window: dict[str, int | bool] = {}
    prf = {"prf": variant.prf, "prf_weight": variant.prf_weight}
    fields: list[tuple[str, int | float | bool]] = []
    for setting in settings:
        match = _SETTING.fullmatch(setting)
        if match is None:
            raise ValueError(f"variant {name!r}: want +name=value, got {setting!r}")
        if match.group(1) == "preset":
            chosen = match.group(2)
        elif match.group(1) == "depth":
            depth = int(match.group(2))
        elif match.group(1) in ("prf", "prfWeight"):
            key = "prf_weight" if match.group(1) == "prfWeight" else "prf"
            prf[key] = float(match.group(2)) if key == "prf_weight" else int(match.group(2))
        elif match.group(1) in ("before", "after", "own"):
            window[match.group(1)] = int(match.group(2))
        elif match.group(1) in ("across", "decay"):
            window[match.group(1)] = match.group(2).lower() == "true"
        else:
            raw = match.group(2)
            value = {"true": True, "false": False}.get(raw.lower()) if raw.isalpha() else None
            if value is None:  # integer fields (e.g. memoryTokenBudget) refuse a float
                value = int(raw) if raw.isdigit() else float(raw)
            fields.append((match.group(1), value))
    out = dataclasses.replace(
        variant,
        name=name,
        preset=chosen,
        ranking=tuple(fields),
        depth=depth,
        window=Window(**window) if window else variant.window,  # type: ignore[arg-type]
        **prf,  # type: ignore[arg-type]
    )
    out.rank_config()  # an unknown field, preset or value is refused here, not mid-run
    return out
