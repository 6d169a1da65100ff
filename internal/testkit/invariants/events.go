package invariants

// checkEvents adds the shape of the outbox's rows, which its four writers build and no
// CHECK constraint verifies any more (migrations/00039):
//
//	(m) every event belongs to exactly one of a backfill and a group, and has exactly one of
//	    a kind (a thin row) and a type's name (a row written as before 00037).
func checkEvents(check func(name, query string, args ...any)) {
	check("(m) an event of exactly one backfill or group, with exactly one of kind and type", `
		SELECT id, backfill_id, group_id, kind, type FROM outbox
		WHERE (backfill_id IS NULL) = (group_id IS NULL) OR (kind IS NULL) = (type IS NULL)`)
}
