"""The dashboard's pages (GET): overview, jobs by state, one job, dead set, scheduled, workers,
ordered keys, sharded runs and batching; each reads ``queue.admin`` and the activity counters.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from batchy.jobs import Activity, ConfigError, RunInfo, ShardedJob

from ._charts import Series, bars, lines, sparkline
from ._dashboard import of, screened
from ._format import path_part

__all__ = ["ROUTES"]

#: The states jobs are listed by (:meth:`batchy.jobs.Admin.jobs`), in the tabs' order.
STATES = ("queued", "scheduled", "retrying", "running", "blocked", "dead", "done")
#: Jobs per page of a listing, unless the page asks for another number.
PAGE = 50
#: Runs shown per sharded job, latest first.
RUNS = 20


def _limit(request: Request, default: int = PAGE) -> int:
    text = request.query_params.get("limit", "")
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 1000:
        raise ConfigError(
            f"page size limit={text!r} is not a number from 1 to 1000; e.g. ?limit=100"
        )
    return int(text)


def _filters(request: Request) -> dict[str, str | None]:
    q = request.query_params
    return {name: screened(name, q.get(name) or None) for name in ("queue", "job", "key")}


async def overview(request: Request) -> Response:
    dash = of(request)
    info = await dash.admin.info()
    activity = await Activity.read(dash.queue.backend, minutes=60)
    names = sorted({q.name for q in info.queues} | set(activity.labels("processed")))
    found = {q.name: q for q in info.queues}
    rows = [
        {
            "name": name,
            "info": found.get(name),
            "processed": activity.total("processed", name),
            "failed": activity.total("failed", name),
            "spark": sparkline(name, activity.series("processed", name)),
        }
        for name in names
    ]
    chart = bars(
        "throughput",
        "Jobs processed and failed per minute, last hour (UTC)",
        activity.first,
        [
            Series("processed", activity.sum_series("processed"), "ok"),
            Series("failed", activity.sum_series("failed"), "bad"),
        ],
    )
    totals = {
        "queued": sum(q.size for q in info.queues),
        "running": sum(q.running for q in info.queues),
        "scheduled": sum(q.scheduled for q in info.queues),
        "retrying": sum(q.retrying for q in info.queues),
        "dead": info.dead,
        "workers": len(info.workers),
    }
    context = {"title": "Overview", "rows": rows, "chart": chart, "totals": totals}
    return dash.render(request, "overview.html", context)


async def jobs(request: Request) -> Response:
    dash = of(request)
    q = request.query_params
    wanted = (q.get("id") or "").strip()
    if wanted:  # the search box's "go to id"
        return RedirectResponse(dash.href(request, f"/jobs/{path_part(wanted)}"), status_code=303)
    state = q.get("state") or "queued"
    filters = _filters(request)
    page = await dash.admin.jobs(
        state, after=q.get("after") or None, limit=_limit(request), **filters
    )
    info = await dash.admin.info()
    counts = {
        "queued": sum(x.size for x in info.queues),
        "scheduled": sum(x.scheduled for x in info.queues),
        "retrying": sum(x.retrying for x in info.queues),
        "running": sum(x.running for x in info.queues),
        "dead": info.dead,
    }
    context = {
        "title": f"Jobs: {state}",
        "state": state,
        "states": STATES,
        "counts": counts,
        "page": page,
        "filters": filters,
        "queues": sorted({x.name for x in info.queues}),
        "job_types": sorted(dash.queue.jobs),
    }
    return dash.render(request, "jobs.html", context)


async def job(request: Request) -> Response:
    dash = of(request)
    found = await dash.admin.job(screened("job id", request.path_params["job_id"]))
    return dash.render(request, "job.html", {"title": f"Job {found.id}", "job": found})


async def dead(request: Request) -> Response:
    dash = of(request)
    q = request.query_params
    filters = _filters(request)
    filters.pop("key")
    page = await dash.admin.jobs(
        "dead", after=q.get("after") or None, limit=_limit(request, 25), **filters
    )
    info = await dash.admin.info()
    context = {
        "title": "Dead jobs",
        "page": page,
        "filters": filters,
        "total": info.dead,
        "queues": sorted({x.name for x in info.queues}),
        "job_types": sorted(dash.queue.jobs),
    }
    return dash.render(request, "dead.html", context)


async def scheduled(request: Request) -> Response:
    dash = of(request)
    q = request.query_params
    page = await dash.admin.jobs("scheduled", after=q.get("after") or None, limit=_limit(request))
    context = {
        "title": "Scheduled and periodic jobs",
        "page": page,
        "periodics": dash.admin.periodics(),
    }
    return dash.render(request, "scheduled.html", context)


async def workers(request: Request) -> Response:
    dash = of(request)
    found = await dash.admin.workers()
    context = {"title": "Workers", "workers": sorted(found, key=lambda w: w.id)}
    return dash.render(request, "workers.html", context)


async def keys(request: Request) -> Response:
    dash = of(request)
    busiest, stalled = await dash.admin.keys(_limit(request, 25))
    context = {"title": "Ordered keys", "busiest": busiest, "stalled": stalled}
    return dash.render(request, "keys.html", context)


def _entry(sharded: ShardedJob, run: RunInfo) -> dict[str, Any]:
    total = len(run.shards)
    percent = math.floor(100 * run.done / total) if total else 0
    progress = {"done": run.done, "total": total, "failed": run.failed, "percent": percent}
    # Each shard with its job's id: the shard's page shows what the table cuts.
    shards = [(s, sharded.shard_id(run.run, s.shard)) for s in run.shards]
    return {"run": run.run, "started": run.started, "shards": shards, "progress": progress}


async def shards(request: Request) -> Response:
    dash = of(request)
    q = request.query_params
    chosen_job, chosen_run = q.get("job"), screened("run", q.get("run"))
    sharded_jobs = []
    for name, sharded in sorted(dash.queue.sharded_jobs.items()):
        # The runs the store remembers (Admin.runs), latest first.
        found = await dash.admin.runs(sharded, limit=RUNS)
        if chosen_job == name and chosen_run and chosen_run not in [r.run for r in found]:
            # Asked for by name: show it, even if the store has forgotten its start
            # (no start time: 0.0, which the page leaves out).
            states = await dash.admin.shards(sharded, chosen_run)
            found.insert(0, RunInfo(name, chosen_run, 0.0, tuple(states)))
        entries = [_entry(sharded, r) for r in found]
        sharded_jobs.append({"name": name, "shards": sharded.shards, "runs": entries})
    context = {"title": "Sharded runs", "sharded_jobs": sharded_jobs}
    return dash.render(request, "shards.html", context)


async def batching(request: Request) -> Response:
    dash = of(request)
    activity = await Activity.read(dash.queue.backend, minutes=60)
    jobs_per_minute = activity.sum_series("jobs")
    rounds_per_minute = activity.sum_series("rounds")
    mean_rounds = [
        r / j if j else math.nan for r, j in zip(rounds_per_minute, jobs_per_minute, strict=True)
    ]
    rounds_chart = lines(
        "rounds",
        "Mean batchy rounds per job, per minute (UTC)",
        activity.first,
        [Series("rounds per job", mean_rounds, "s0")],
    )
    overall = bars(
        "batching",
        "Keys loaded and batch calls made per minute, all loaders (UTC)",
        activity.first,
        [
            Series("keys", activity.sum_series("keys"), "s1"),
            Series("calls", activity.sum_series("calls"), "s2"),
        ],
    )
    loaders = [
        {
            "name": name,
            "calls": activity.total("calls", name),
            "keys": activity.total("keys", name),
            "per_call": activity.ratio("keys", "calls", name),
            "chart": lines(
                f"loader-{name}",
                f"{name}: keys and calls per minute (UTC)",
                activity.first,
                [
                    Series("keys", activity.series("keys", name), "s1"),
                    Series("calls", activity.series("calls", name), "s2"),
                ],
            ),
        }
        for name in activity.labels("calls")
    ]
    job_types = [
        {
            "name": name,
            "jobs": activity.total("jobs", name),
            "rounds": activity.ratio("rounds", "jobs", name),
        }
        for name in activity.labels("jobs")
    ]
    context = {
        "title": "Batching",
        "rounds_chart": rounds_chart,
        "overall": overall,
        "loaders": loaders,
        "job_types": job_types,
        "calls": activity.total("calls"),
        "keys": activity.total("keys"),
    }
    return dash.render(request, "batching.html", context)


ROUTES = [
    Route("/", overview, name="overview"),
    Route("/jobs", jobs, name="jobs"),
    Route("/jobs/{job_id:path}", job, name="job"),
    Route("/dead", dead, name="dead"),
    Route("/scheduled", scheduled, name="scheduled"),
    Route("/workers", workers, name="workers"),
    Route("/keys", keys, name="keys"),
    Route("/shards", shards, name="shards"),
    Route("/batching", batching, name="batching"),
]
