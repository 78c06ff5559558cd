//! The migrations' names sort in the order they were added, and none is dated in the future
//! (issue 45 point 7). sqlx applies migrations in the order of their stamps
//! (`YYYYMMDDHHMMSS_name.sql`, `sqlx migrate add` stamps the current UTC time), so a stamp in the
//! future makes every later `sqlx migrate add` sort before it, and a branch merged with an older
//! stamp than one already on the main line would run before it on a fresh database. The add
//! order is git's, along the first-parent line (a migration a merge brings counts as added by the
//! merge); a file not yet committed counts as added now. CI clones with full history.

use std::{collections::BTreeMap, path::Path, process::Command};

use chrono::{NaiveDateTime, Utc};

/// The stamp of a migration file name (`20261203001400_drop_due.sql`), as a time.
fn stamp(name: &str) -> NaiveDateTime {
    let digits = name.split('_').next().unwrap_or_default();
    NaiveDateTime::parse_from_str(digits, "%Y%m%d%H%M%S")
        .unwrap_or_else(|e| panic!("{name}: the stamp is not YYYYMMDDHHMMSS ({e})"))
}

/// When each migration file in `dir` was added along HEAD's first-parent line (UTC author date),
/// in add order: (add commit's position, its date) by file name. `None` without git history.
fn added(dir: &Path) -> Option<BTreeMap<String, (usize, NaiveDateTime)>> {
    let out = Command::new("git")
        .current_dir(dir)
        .env("TZ", "UTC")
        .args([
            "log",
            "--reverse",
            "--first-parent",
            "--diff-merges=first-parent",
        ])
        .args(["--no-renames", "--diff-filter=A", "--name-only"])
        .args([
            "--format=commit %ad",
            "--date=format-local:%Y%m%d%H%M%S",
            "--",
            ".",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let mut added = BTreeMap::new();
    let (mut position, mut date) = (0, None);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(at) = line.strip_prefix("commit ") {
            position += 1;
            date = Some(NaiveDateTime::parse_from_str(at, "%Y%m%d%H%M%S").unwrap());
        } else if let Some(file) = line.strip_suffix(".sql") {
            let name = Path::new(file).file_name().unwrap().to_string_lossy();
            // The last add wins: a file deleted and added again counts from its return.
            added.insert(format!("{name}.sql"), (position, date.unwrap()));
        }
    }
    Some(added)
}

/// The problems of `files` (name → when added, or `None` when not committed), checked against
/// `now`: stamps unique, none after the file's add date, each after every stamp added before it.
fn problems(
    files: &[String],
    added: &BTreeMap<String, (usize, NaiveDateTime)>,
    now: NaiveDateTime,
) -> Vec<String> {
    let mut in_add_order: Vec<(usize, &String, NaiveDateTime)> = files
        .iter()
        .map(|f| {
            let (position, at) = added.get(f).copied().unwrap_or((usize::MAX, now));
            (position, f, at)
        })
        .collect();
    in_add_order.sort();
    let mut problems = Vec::new();
    let mut latest: Option<&String> = None;
    for (_, name, at) in in_add_order {
        if stamp(name) > at {
            problems.push(format!(
                "{name} is dated after it was added ({at}): stamp it with the time it was written"
            ));
        }
        if let Some(before) = latest
            && stamp(name) <= stamp(before)
        {
            problems.push(format!(
                "{name} sorts before {before}, which was added earlier: give it a stamp after \
                 every existing migration's (`sqlx migrate add` stamps now)"
            ));
        }
        if latest.is_none_or(|l| stamp(name) > stamp(l)) {
            latest = Some(name);
        }
    }
    problems
}

#[test]
fn migrations_sort_in_the_order_they_were_added_and_none_is_dated_in_the_future() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 28, "{files:?}");
    let added = added(&dir).unwrap_or_default();
    if added.is_empty() {
        println!("no git history: every migration checked as added now");
    }
    let problems = problems(&files, &added, Utc::now().naive_utc());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_migration_from_the_future_or_sorting_before_an_older_one_is_named() {
    let at = |s: &str| NaiveDateTime::parse_from_str(s, "%Y%m%d%H%M%S").unwrap();
    let files = [
        "20261130000001_init.sql",
        "20261201000001_b.sql",
        "20270301000003_drop_due.sql",
        "20261202000001_merged_late.sql",
        "20261206000000_new.sql",
    ]
    .map(String::from);
    let added = BTreeMap::from([
        (files[0].clone(), (1, at("20261130073109"))),
        (files[1].clone(), (2, at("20261201081309"))),
        (files[2].clone(), (3, at("20261203001400"))),
        // A branch's migration, merged after the main line's newer one.
        (files[3].clone(), (4, at("20261204000000"))),
    ]);
    let now = at("20261206020000");
    let problems = problems(&files, &added, now);
    assert_eq!(
        problems,
        [
            "20270301000003_drop_due.sql is dated after it was added (2026-12-03 00:14:00): \
             stamp it with the time it was written",
            "20261202000001_merged_late.sql sorts before 20270301000003_drop_due.sql, which was \
             added earlier: give it a stamp after every existing migration's (`sqlx migrate add` \
             stamps now)",
            "20261206000000_new.sql sorts before 20270301000003_drop_due.sql, which was added \
             earlier: give it a stamp after every existing migration's (`sqlx migrate add` \
             stamps now)",
        ]
    );
}

/// What a migration destroys that the previous release's binary may still read or write:
/// `DROP COLUMN`, `DROP TABLE` or `RENAME` (SQL comments aside), unless a line
/// `-- expand-contract: <reason>` says why it is safe (docs/upgrading.md). `None`: nothing.
fn destructive_without_marker(sql: &str) -> Option<&'static str> {
    let marked = sql.lines().any(|l| {
        l.trim()
            .strip_prefix("-- expand-contract:")
            .is_some_and(|reason| !reason.trim().is_empty())
    });
    let code: String = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ")
        .to_uppercase();
    let words: Vec<&str> = code.split_whitespace().collect();
    let found = words.windows(2).find_map(|w| match w {
        ["DROP", "COLUMN"] => Some("DROP COLUMN"),
        ["DROP", "TABLE"] => Some("DROP TABLE"),
        _ => None,
    });
    let found = found.or_else(|| words.contains(&"RENAME").then_some("RENAME"));
    if marked { None } else { found }
}

/// The newest release tag (`v*`) in HEAD's history, and the migration files it holds.
fn released_migrations() -> Option<(String, Vec<String>)> {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let tags = git(&[
        "tag",
        "--merged",
        "HEAD",
        "--list",
        "v*",
        "--sort=-v:refname",
    ])?;
    let tag = tags.lines().next()?.trim().to_owned();
    let files = git(&["ls-tree", "--name-only", &tag, "migrations/"])?;
    let names = files
        .lines()
        .filter_map(|p| Path::new(p).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    Some((tag, names))
}

/// Issue 47 (docs/upgrading.md, expand/contract): the previous release's binary runs on the
/// schema a new release migrated, so a migration added since the last release tag that drops or
/// renames something carries `-- expand-contract: <reason>` (a destructive step waits one
/// release, until no binary in service reads what it removes).
#[test]
fn a_migration_since_the_last_release_drops_or_renames_nothing_without_a_reason() {
    let Some((tag, released)) = released_migrations() else {
        eprintln!("no release tag in HEAD's history (a clone without tags): nothing to check");
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".sql") || released.contains(&name) {
            continue;
        }
        let sql = std::fs::read_to_string(dir.join(&name)).unwrap();
        if let Some(what) = destructive_without_marker(&sql) {
            problems.push(format!(
                "{name} (added after {tag}): {what} without `-- expand-contract: <reason>`"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_expand_contract_check_names_a_drop_or_a_rename_and_accepts_a_reason() {
    for (sql, found) in [
        (
            "ALTER TABLE messages DROP COLUMN wait_reason;",
            Some("DROP COLUMN"),
        ),
        (
            "alter table messages\n  drop   column throttles;",
            Some("DROP COLUMN"),
        ),
        ("DROP TABLE IF EXISTS old_jobs;", Some("DROP TABLE")),
        (
            "ALTER TABLE messages RENAME COLUMN body TO html;",
            Some("RENAME"),
        ),
        (
            "ALTER TABLE messages ADD COLUMN note text; -- no DROP COLUMN here",
            None,
        ),
        ("DROP INDEX IF EXISTS messages_due;", None),
        (
            "-- expand-contract: 0.2.0 stopped reading it; 0.1.0 is out of service\nALTER TABLE messages DROP COLUMN wait_reason;",
            None,
        ),
        (
            "-- expand-contract:\nALTER TABLE messages DROP COLUMN wait_reason;",
            Some("DROP COLUMN"),
        ),
    ] {
        assert_eq!(destructive_without_marker(sql), found, "{sql}");
    }
}
