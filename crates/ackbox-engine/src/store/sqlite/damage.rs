//! SQLite's own checks of the database file, with each problem located by
//! byte offset where SQLite names a page — one reading shared by the
//! refusal at open and `ackbox store check`.

use rusqlite::{Connection, ErrorCode};

use super::database_error::database_error;
use crate::store::StoreError;

/// How hard to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Thoroughness {
    /// `quick_check`: every page and record, without cross-checking indexes;
    /// linear in the file's size, cheap enough for a start after a crash.
    Quick,
    /// `integrity_check`: also every index against its table.
    Full,
}

/// The problems SQLite finds in the database, each with the byte offset of
/// the page it names; empty when the file is sound. A file so damaged that
/// the check itself cannot read it is one problem, not an error.
pub(crate) fn problems(
    connection: &Connection,
    thoroughness: Thoroughness,
) -> Result<Vec<String>, StoreError> {
    let pragma = match thoroughness {
        Thoroughness::Quick => "PRAGMA quick_check",
        Thoroughness::Full => "PRAGMA integrity_check",
    };
    let lines = connection.prepare(pragma).and_then(|mut statement| {
        statement
            .query_map([], |row| row.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()
    });
    let lines = match lines {
        Ok(lines) => lines,
        Err(error) if error.sqlite_error_code() == Some(ErrorCode::DatabaseCorrupt) => {
            return Ok(vec![error.to_string()]);
        }
        Err(error) => return Err(database_error("check the database")(error)),
    };
    if lines.iter().all(|line| line == "ok") {
        return Ok(Vec::new());
    }
    let page_size = connection
        .query_row("PRAGMA page_size", [], |row| row.get::<_, i64>(0))
        .map_err(database_error("page_size"))?
        .unsigned_abs();
    Ok(lines
        .into_iter()
        .map(|line| match named_page(&line) {
            Some(page) => format!(
                "{line} (page {page} starts at byte {})",
                (page - 1) * page_size
            ),
            None => line,
        })
        .collect())
}

/// The page a problem line names: SQLite writes "Page 7: ..." or
/// "... in page 7 ..." (pages count from 1).
fn named_page(line: &str) -> Option<u64> {
    let rest = line
        .strip_prefix("Page ")
        .or_else(|| line.split_once("page ").map(|(_, rest)| rest))?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse::<u64>().ok().filter(|page| *page > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_page_is_read_from_either_of_sqlites_phrasings() {
        assert_eq!(
            named_page("Page 7: btreeInitPage() returns error code 11"),
            Some(7)
        );
        assert_eq!(
            named_page("Tree 2 page 12 cell 3: Rowid 9 out of order"),
            Some(12)
        );
        assert_eq!(named_page("row 4 missing from index idx"), None);
        assert_eq!(named_page("Page 0: nonsense"), None);
    }
}
