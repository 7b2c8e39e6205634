# kbundle harvest: merge copies of one SQLite database, record by record
# (harvest/mergedb.go). argv: OUT IN... (lowest rank first). Prints one
# JSON object: base (the copy merged into), records, added, conflicts,
# left_out [{copy, why}], error ("" when OUT is the merged database).
#
# OUT starts as the lowest rank's valid copy; each other valid copy adds
# the rows whose unique key OUT lacks. A table's INTEGER PRIMARY KEY (a
# rowid: MIOpen's `id`) is not copied but given anew, and an INTEGER
# column named after another table (MIOpen's perf_db.config) refers to
# that table's id and is mapped by its key (ROCm/MIOpen
# src/include/miopen/kern_db.hpp, src/include/miopen/sqlite_db.hpp,
# src/sqlite_db.cpp).
import json
import shutil
import sqlite3
import sys

out, ins = sys.argv[1], sys.argv[2:]
res = {"base": -1, "records": 0, "added": 0, "conflicts": 0, "left_out": [], "error": ""}


def q(n):
    return '"' + n.replace('"', '""') + '"'


def schema(con, db):
    rows = con.execute(
        "SELECT name, sql FROM %s.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%%' ORDER BY name" % db
    ).fetchall()
    return dict(rows)


def check(path):
    """The copy's tables (name -> sql), or None and why not."""
    try:
        con = sqlite3.connect(path)
    except sqlite3.Error as e:
        return None, str(e)
    try:
        con.execute("PRAGMA trusted_schema = OFF")
        r = con.execute("PRAGMA integrity_check").fetchall()
        if r != [("ok",)]:
            return None, "PRAGMA integrity_check: " + "; ".join(str(x[0]) for x in r[:3])
        if con.execute("SELECT count(*) FROM sqlite_master WHERE type NOT IN ('table', 'index')").fetchone()[0]:
            return None, "it has triggers or views, which MIOpen does not make"
        return schema(con, "main"), None
    except sqlite3.Error as e:
        return None, "not a valid SQLite database (%s)" % e
    finally:
        con.close()


def layout(con, t, tables):
    """The columns of t, its rowid column (or None), its key, its references."""
    info = con.execute("PRAGMA main.table_info(%s)" % q(t)).fetchall()
    cols = [r[1] for r in info]
    pks = [r for r in info if r[5] > 0]
    alias = pks[0][1] if len(pks) == 1 and pks[0][2].upper() == "INTEGER" else None
    key = None
    for idx in con.execute("PRAGMA main.index_list(%s)" % q(t)).fetchall():
        if idx[2] == 1 and idx[3] != "pk" and not idx[4]:
            key = [r[2] for r in con.execute("PRAGMA main.index_info(%s)" % q(idx[1])).fetchall()]
            if None not in key:
                break
            key = None
    if key is None and pks and alias is None:
        key = [r[1] for r in sorted(pks, key=lambda r: r[5])]
    if key is None:
        raise ValueError("table %s has no unique key to merge its rows by" % t)
    refs = {}
    for r in info:
        if r[1] != alias and r[2].upper() in ("INTEGER", "INT") and r[1] in tables and r[1] != t:
            refs[r[1]] = r[1]
    return cols, alias, key, refs


def merge(con, order, lay, k):
    maps = {}
    for t in order:
        cols, alias, key, refs = lay[t]
        data = [c for c in cols if c != alias]

        def src(c):
            if c in refs:
                return "(SELECT m FROM temp.%s WHERE o = s.%s)" % (maps[refs[c]], q(c))
            return "s." + q(c)

        keymatch = " AND ".join("d.%s IS %s" % (q(c), src(c)) for c in key)
        same = " AND ".join("d.%s IS %s" % (q(c), src(c)) for c in data)
        known = " AND ".join("%s IS NOT NULL" % src(c) for c in refs) or "1"
        res["conflicts"] += con.execute(
            "SELECT count(*) FROM o.%s s JOIN main.%s d ON %s WHERE NOT (%s)" % (q(t), q(t), keymatch, same)
        ).fetchone()[0]
        cur = con.execute(
            "INSERT OR IGNORE INTO main.%s (%s) SELECT %s FROM o.%s s WHERE %s AND NOT EXISTS (SELECT 1 FROM main.%s d WHERE %s)"
            % (q(t), ",".join(q(c) for c in data), ",".join(src(c) for c in data), q(t), known, q(t), keymatch)
        )
        res["added"] += max(cur.rowcount, 0)
        if alias is not None:
            name = "kbundle_map_%d_%d" % (k, len(maps))
            con.execute("CREATE TEMP TABLE %s (o INTEGER PRIMARY KEY, m INTEGER)" % name)
            con.execute(
                "INSERT OR IGNORE INTO temp.%s SELECT s.%s, d.%s FROM o.%s s JOIN main.%s d ON %s"
                % (name, q(alias), q(alias), q(t), q(t), keymatch)
            )
            maps[t] = name


def main():
    valid = []
    tables = None
    for k, p in enumerate(ins):
        t, why = check(p)
        if t is None:
            res["left_out"].append({"copy": k, "why": why})
        elif tables is not None and t != tables:
            res["left_out"].append({"copy": k, "why": "its tables are not those of the lowest rank's copy (another MIOpen version?)"})
        else:
            tables = tables or t
            valid.append(k)
    if not valid:
        res["error"] = "no copy is a valid SQLite database"
        return
    res["base"] = valid[0]
    shutil.copyfile(ins[valid[0]], out)
    con = sqlite3.connect(out, isolation_level=None)
    try:
        con.execute("PRAGMA trusted_schema = OFF")
        lay = {t: layout(con, t, tables) for t in tables}
        order = sorted(tables, key=lambda t: (len(lay[t][3]) > 0, t))
        for k in valid[1:]:
            con.execute("ATTACH DATABASE ? AS o", (ins[k],))
            try:
                con.execute("BEGIN")
                merge(con, order, lay, k)
                con.execute("COMMIT")
            except sqlite3.Error as e:
                con.execute("ROLLBACK")
                res["left_out"].append({"copy": k, "why": "merging it failed: %s" % e})
            con.execute("DETACH DATABASE o")
        r = con.execute("PRAGMA integrity_check").fetchall()
        if r != [("ok",)]:
            res["error"] = "the merged database fails PRAGMA integrity_check: " + "; ".join(str(x[0]) for x in r[:3])
            return
        res["records"] = sum(con.execute("SELECT count(*) FROM main.%s" % q(t)).fetchone()[0] for t in tables)
    except (sqlite3.Error, ValueError) as e:
        res["error"] = str(e)
    finally:
        con.close()


try:
    main()
except Exception as e:  # never a traceback instead of the answer
    res["error"] = "%s: %s" % (type(e).__name__, e)
json.dump(res, sys.stdout)
