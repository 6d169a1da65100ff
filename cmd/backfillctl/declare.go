package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/backfillsvc/backfill/client"
)

// Every command is the same steps: flag set → parse → operand → client → call → JSON or
// table (→ where the page is). The steps live here once; a command declares its operand, its
// flags and its call (commands.go), and its columns.

// runFunc is a command's whole run, given its flag set (made by run from the command's
// name and synopsis, with the global flags) and its arguments.
type runFunc func(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error

// operand reads a command's positional arguments.
type operand[A any] func(pos []string) (A, error)

// none is the operand of a command that takes no positional arguments.
func none(pos []string) (struct{}, error) {
	if len(pos) != 0 {
		return struct{}{}, usageErrorf("unexpected arguments %q", pos)
	}
	return struct{}{}, nil
}

// word is the operand of a command that takes one name (a DAG_ID, a pool NAME, a URL).
func word(what string) operand[string] {
	return func(pos []string) (string, error) {
		if len(pos) != 1 {
			return "", usageErrorf("expected one %s, got %d arguments", what, len(pos))
		}
		return pos[0], nil
	}
}

// number is the operand of a command that takes one numeric id.
func number(what string) operand[int64] {
	return func(pos []string) (int64, error) { return oneID(pos, what) }
}

// oneID reads the single positive numeric id a command takes.
func oneID(args []string, what string) (int64, error) {
	if len(args) != 1 {
		return 0, usageErrorf("expected one %s, got %d arguments", what, len(args))
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id < 1 {
		return 0, usageErrorf("%s must be a positive integer, not %q", what, args[0])
	}
	return id, nil
}

// runName is a run's DAG_ID and RUN_ID.
type runName struct{ dagID, runID string }

func dagRun(pos []string) (runName, error) {
	if len(pos) != 2 {
		return runName{}, usageErrorf("expected DAG_ID and RUN_ID, got %d arguments", len(pos))
	}
	return runName{pos[0], pos[1]}, nil
}

var (
	backfillID = number("backfill ID")
	dagID      = word("DAG_ID")
	runID      = number("run ID (the numeric id, not the run_id)")
)

// action is what a command does once its command line is read and its client made.
type action[A any] func(ctx context.Context, c *cli, api *client.Client, arg A) error

// do declares a command: flags registers its flags on the flag set and answers what it does
// with them once they are parsed.
func do[A any](arg operand[A], flags func(fs *flag.FlagSet) action[A]) runFunc {
	return func(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
		act := flags(fs)
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		a, err := arg(pos)
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		return act(ctx, c, api, a)
	}
}

// noFlags is the flags of a command that has none of its own.
func noFlags[A any](act action[A]) func(*flag.FlagSet) action[A] {
	return func(*flag.FlagSet) action[A] { return act }
}

// call is one SDK call of a command, as a method expression: (*client.Client).GetDag.
type call[A, T any] func(api *client.Client, ctx context.Context, arg A) (T, error)

// get declares a command of one call, without flags of its own, whose answer show shows.
func get[A, T any](arg operand[A], f call[A, T], show func(*cli, T) error) runFunc {
	return do(arg, noFlags(func(ctx context.Context, c *cli, api *client.Client, a A) error {
		v, err := f(api, ctx, a)
		if err != nil {
			return err
		}
		return show(c, v)
	}))
}

// remove declares a delete: one call that answers nothing, then said tells what happened.
func remove[A any](arg operand[A], f func(api *client.Client, ctx context.Context, arg A) error, said func(*cli, A) error) runFunc {
	return do(arg, noFlags(func(ctx context.Context, c *cli, api *client.Client, a A) error {
		if err := f(api, ctx, a); err != nil {
			return err
		}
		return said(c, a)
	}))
}

// page is the part of a listing the table shows: its entries, the total, and the cursor of
// the next page (nil for none, or a listing without cursors).
type page[T any] struct {
	items []T
	total int64
	next  *string
}

// listing declares a list command: its paging (with --cursor or without), how it reads one
// page, and its columns. A listing with filters of its own has flags instead of read: it
// registers them and answers the read that uses them.
type listing[A, L, T any] struct {
	arg     operand[A]
	cursors bool
	read    func(ctx context.Context, api *client.Client, arg A, pg *pageFlags) (L, error)
	flags   func(fs *flag.FlagSet, pg *pageFlags) func(ctx context.Context, api *client.Client, arg A) (L, error)
	page    func(L) page[T]
	cols    columns[T]
}

// list is a list command: the page as JSON (the whole collection), or as a table with where
// it is in the longer list and how to read the next one.
func list[A, L, T any](l listing[A, L, T]) runFunc {
	return do(l.arg, func(fs *flag.FlagSet) action[A] {
		pg := &pageFlags{cursors: l.cursors}
		pg.register(fs)
		read := func(ctx context.Context, api *client.Client, a A) (L, error) { return l.read(ctx, api, a, pg) }
		if l.flags != nil {
			read = l.flags(fs, pg)
		}
		return func(ctx context.Context, c *cli, api *client.Client, a A) error {
			if err := pg.check(fs); err != nil {
				return err
			}
			got, err := read(ctx, api, a)
			if err != nil {
				return err
			}
			if c.g.output == "json" {
				return c.printJSON(got)
			}
			p := l.page(got)
			if err := showTable(c, l.cols, p.items); err != nil {
				return err
			}
			if pg.cursor == "" {
				c.printPage(len(p.items), pg.offset, p.total)
			}
			c.printNext(p.next)
			return nil
		}
	})
}

// pageFlags are --limit, --offset and, on listings that have cursors, --cursor.
type pageFlags struct {
	cursors       bool
	limit, offset int
	cursor        string
	// The query parameters, set by check.
	limitP, offsetP *int
	cursorP         *string
}

func (p *pageFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.limit, "limit", 50, "page size, 1..1000")
	if !p.cursors {
		fs.IntVar(&p.offset, "offset", 0, "entries to skip")
		return
	}
	fs.IntVar(&p.offset, "offset", 0, "entries to skip (not with --cursor)")
	fs.StringVar(&p.cursor, "cursor", "", "start after the page that printed this next cursor (not with --offset)")
}

// check reads the page's query parameters. A listing with cursors sends the offset only when
// it is given, so that a cursor alone is a valid request.
func (p *pageFlags) check(fs *flag.FlagSet) error {
	p.limitP, p.offsetP = &p.limit, &p.offset
	if !p.cursors {
		return nil
	}
	if isSet(fs, "offset") && p.cursor != "" {
		return usageErrorf("--cursor and --offset are two ways to start a page: give one")
	}
	if !isSet(fs, "offset") {
		p.offsetP = nil
	}
	if p.cursor != "" {
		p.cursorP = &p.cursor
	}
	return nil
}

// columns are how a table shows one kind of thing: its header and a row per item.
type columns[T any] struct {
	header []string
	row    func(T) []string
}

func showTable[T any](c *cli, cols columns[T], items []T) error {
	rows := [][]string{cols.header}
	for _, it := range items {
		rows = append(rows, cols.row(it))
	}
	return c.table(rows)
}

// showOne shows one item: as JSON, or as a table of one row.
func showOne[T any](cols columns[T]) func(*cli, T) error {
	return func(c *cli, v T) error {
		if c.g.output == "json" {
			return c.printJSON(v)
		}
		return showTable(c, cols, []T{v})
	}
}

// enum reads an enumerated flag value into the SDK's type, checked against the SDK's own
// list of its values.
func enum[T ~string](flagName, v string, all []T) (T, error) {
	for _, a := range all {
		if string(a) == v {
			return a, nil
		}
	}
	return "", usageErrorf("--%s must be one of %s, not %q", flagName, joinEnum(all), v)
}

// joinEnum is an enum's values as the usage lists them.
func joinEnum[T ~string](all []T) string {
	names := make([]string, len(all))
	for i, a := range all {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// setIf points *dst at v when the flag was given, so that an absent flag takes the
// server's default.
func setIf[T any](fs *flag.FlagSet, name string, dst **T, v T) {
	if isSet(fs, name) {
		*dst = &v
	}
}

// printNext tells how to read the next page, under a table.
func (c *cli) printNext(next *string) {
	if next != nil {
		fmt.Fprintf(c.stdout, "(more: add --cursor %s)\n", *next)
	}
}
