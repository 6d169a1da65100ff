package handlers

import (
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// The service answers in UTC.
func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// confOut answers a stored JSON object as PostgreSQL gives it back: raw bytes, never decoded
// into Go values, so every number keeps its digits. SQL NULL answers null.
func confOut(raw repo.JSON) *api.Conf {
	if len(raw) == 0 {
		return nil
	}
	c := api.Conf(raw)
	return &c
}

// confIn takes a request's free-form object as the client sent it (the spec validator has
// checked that it is an object or null); null and absent both store SQL NULL.
func confIn(c *api.Conf) repo.JSON {
	if c == nil {
		return nil
	}
	return repo.JSON(*c)
}

func dagOut(d repo.Dag) api.Dag {
	return api.Dag{
		DagId:         d.DagID,
		Schedule:      d.Schedule,
		Timezone:      d.Timezone,
		MaxActiveRuns: int32(d.MaxActiveRuns),
		IsPaused:      d.IsPaused,
		Description:   d.Description,
		CreatedAt:     utc(d.CreatedAt),
		UpdatedAt:     utc(d.UpdatedAt),
		Upstreams:     upstreamsOut(d.Upstreams),
		Downstreams:   nonNil([]string(d.Downstreams)),
		DependsOnPast: d.DependsOnPast,
	}
}

func upstreamsOut(ups repo.Upstreams) []api.DagUpstream {
	out := make([]api.DagUpstream, len(ups))
	for i, u := range ups {
		out[i] = api.DagUpstream{DagId: u.DagID, Mapping: api.DependencyMapping(u.Mapping), Lookback: int32(u.Lookback)}
	}
	return out
}

// nonNil answers an empty list for none: the spec's arrays are never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func runOut(r repo.Run) api.DagRun {
	return api.DagRun{
		Id:                r.ID,
		DagId:             r.DagID,
		RunId:             r.RunID,
		LogicalDate:       utc(r.LogicalDate),
		DataIntervalStart: utc(r.DataIntervalStart),
		DataIntervalEnd:   utc(r.DataIntervalEnd),
		State:             api.DagRunState(r.State),
		RunType:           api.RunType(r.RunType),
		BackfillId:        r.BackfillID,
		Conf:              confOut(r.Conf),
		Attempt:           int32(r.Attempt),
		WorkerId:          r.WorkerID,
		QueuedAt:          utcPtr(r.QueuedAt),
		StartDate:         utcPtr(r.StartDate),
		EndDate:           utcPtr(r.EndDate),
		LeaseExpiresAt:    utcPtr(r.LeaseExpiresAt),
		Note:              r.Note,
		CodeRef:           r.CodeRef,
		NotBefore:         utcPtr(r.NotBefore),
	}
}

// convertAll answers each of in converted by f: never nil, so that an empty list answers [].
func convertAll[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func backfillOut(b repo.Backfill) api.Backfill {
	return api.Backfill{
		Id:                b.ID,
		DagId:             b.DagID,
		FromDate:          utc(b.FromDate),
		ToDate:            utc(b.ToDate),
		RunBackwards:      b.RunBackwards,
		DagRunConf:        confOut(b.DagRunConf),
		ReprocessBehavior: api.ReprocessBehavior(b.ReprocessBehavior),
		MaxActiveRuns:     int32(b.MaxActiveRuns),
		Description:       b.Description,
		State:             api.BackfillState(b.State),
		IsPaused:          b.State == domain.BackfillPaused,
		CreatedAt:         utc(b.CreatedAt),
		UpdatedAt:         utc(b.UpdatedAt),
		CompletedAt:       utcPtr(b.CompletedAt),
		MaxFailedRuns:     int32Ptr(b.MaxFailedRuns),
		PauseReason:       (*api.BackfillPauseReason)(b.PauseReason),
		PlanHash:          b.PlanHash,
		ParentBackfillId:  b.ParentBackfillID,
		Pool:              b.Pool,
		CodeRef:           b.CodeRef,
		CreatedBy:         b.CreatedBy,
		Reason:            b.Reason,
		Priority:          int32(b.Priority),
		GroupId:           b.GroupID,
		Progress:          progressOut(b.Progress),
	}
}

func progressOut(p repo.Progress) api.BackfillProgress {
	return api.BackfillProgress{
		Total:    p.Total(),
		Queued:   p.Queued,
		Running:  p.Running,
		Success:  p.Success,
		Failed:   p.Failed,
		Canceled: p.Canceled,
		Skipped:  p.Skipped,
		Blocked:  p.Blocked,
	}
}

func int32Ptr(n *int) *int32 {
	if n == nil {
		return nil
	}
	v := int32(*n)
	return &v
}

func slotOut(s repo.BackfillSlot) api.BackfillDagRun {
	var state *api.DagRunState
	if s.State != nil {
		st := api.DagRunState(*s.State)
		state = &st
	}
	return api.BackfillDagRun{
		SortOrdinal:     int32(s.SortOrdinal),
		LogicalDate:     utc(s.LogicalDate),
		DagRunId:        s.DagRunID,
		RunId:           s.RunID,
		State:           state,
		ExceptionReason: s.ExceptionReason,
		Attempt:         int32Ptr(s.Attempt),
		Note:            s.Note,
		BlockedBy:       int32Ptr(s.BlockedBy),
	}
}

func plannedOut(p domain.PlannedSlot) api.DryRunEntry {
	return api.DryRunEntry{
		LogicalDate:     utc(p.LogicalDate),
		SortOrdinal:     int32(p.SortOrdinal),
		Action:          api.DryRunAction(p.Action),
		ExceptionReason: p.ExceptionReason,
	}
}

func estimateOut(e *domain.Estimate) *api.BackfillEstimate {
	if e == nil {
		return nil
	}
	return &api.BackfillEstimate{
		Runs:             int64(e.Runs),
		P50RunSeconds:    e.P50RunSeconds,
		SampleRuns:       int32(e.SampleRuns),
		Concurrency:      int32(e.Concurrency),
		RunnerSeconds:    e.RunnerSeconds,
		WallClockSeconds: e.WallClockSeconds,
	}
}
