//! The one output path. Every command turns its results into rows (a type implementing [`Row`]:
//! `serde::Serialize` for JSON, column headers and cells for the table) and prints them through
//! a [`Printer`]: with `--output table` a header line, then one line per row in columns whose
//! widths are fixed once per table; with `--output json` one JSON object per row per line.
//! Results go to stdout; a write that fails (other than on a closed pipe) is said once on
//! stderr and fails the run (exit 1, see [`output_failed`]).

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use libwool::Error;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::args::Format;
use crate::context::Member;

/// How a column's cells sit in its width.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right (except in the last column, which is never padded: no trailing
    /// blanks).
    Left,
    /// Padded on the left (numbers).
    Right,
}

/// One table column: its header and how its cells are laid out.
#[derive(Clone, Copy)]
pub struct Column {
    /// The header, in capitals (`TARGET`, `IDLE_SECONDS`).
    pub header: &'static str,
    /// The least width, in characters: shorter cells are padded to it, longer ones overflow
    /// (pushing the rest of their line to the right) rather than being cut.
    pub width: usize,
    /// Which side the padding goes.
    pub align: Align,
}

impl Column {
    /// A left-aligned column at least `width` characters wide.
    pub const fn left(header: &'static str, width: usize) -> Self {
        Self {
            header,
            width,
            align: Align::Left,
        }
    }

    /// A right-aligned column at least `width` characters wide.
    pub const fn right(header: &'static str, width: usize) -> Self {
        Self {
            header,
            width,
            align: Align::Right,
        }
    }
}

/// A result line: its JSON object is its `Serialize` form; its table line is its cells.
pub trait Row: Serialize {
    /// The table's columns, left to right.
    fn columns() -> Vec<Column>;

    /// The row's cells, one per column of [`Row::columns`], in the same order.
    fn cells(&self) -> Vec<String>;

    /// Whether the row reports a success; a row that does not makes the run exit 1.
    fn ok(&self) -> bool {
        true
    }
}

/// Prints rows in one format: a table's header when it starts, then each row as it comes (so
/// that rows streamed by `discover --watch` or `reap --interval` line up under the header
/// printed before them). Every row it prints is of the type it was started for.
pub struct Printer {
    format: Format,
    /// The columns, with their widths, taken once for the whole table.
    columns: Vec<Column>,
}

impl Printer {
    /// Starts a table of `R` rows (printing its header) or a run of JSON lines (printing
    /// nothing yet).
    pub fn start<R: Row>(format: Format) -> Self {
        let columns = R::columns();
        if format == Format::Table {
            let headers: Vec<&str> = columns.iter().map(|c| c.header).collect();
            write_out(&(table_line(&columns, &headers) + "\n"));
        }
        Self { format, columns }
    }

    /// Prints one row (of the type the printer was started for); whether it reports a
    /// success ([`Row::ok`]).
    pub fn print<R: Row>(&self, row: &R) -> bool {
        let mut line = self.line(row);
        line.push('\n');
        write_out(&line);
        row.ok()
    }

    /// `row`'s line, without its newline.
    fn line<R: Row>(&self, row: &R) -> String {
        match self.format {
            Format::Json => serde_json::to_string(row).expect("rows serialize to JSON"),
            Format::Table => table_line(&self.columns, &row.cells()),
        }
    }
}

/// How much output [`print_rows`] gathers before writing it: one write a few hundred rows
/// rather than one a row (a 10,000-worker sweep made 10,000 writes).
const OUTPUT_CHUNK_BYTES: usize = 64 * 1024;

/// Prints a whole table (its header even with no rows) or its JSON lines; whether every row
/// reports a success. The rows are all known, so they go out in writes of about
/// [`OUTPUT_CHUNK_BYTES`], not one a row (rows that come one at a time use [`Printer::print`]).
pub fn print_rows<R: Row>(format: Format, rows: impl IntoIterator<Item = R>) -> bool {
    let printer = Printer::start::<R>(format);
    let mut chunk = String::new();
    let mut all_ok = true;
    for row in rows {
        chunk.push_str(&printer.line(&row));
        chunk.push('\n');
        all_ok &= row.ok();
        if chunk.len() >= OUTPUT_CHUNK_BYTES {
            write_out(&chunk);
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        write_out(&chunk);
    }
    all_ok
}

/// One table line: the cells padded to their columns' widths, two blanks apart; no trailing
/// blanks (an empty last cell leaves none after the cell before it).
fn table_line(columns: &[Column], cells: &[impl AsRef<str>]) -> String {
    debug_assert_eq!(columns.len(), cells.len(), "one cell per column");
    let mut line = String::new();
    for (index, (column, cell)) in columns.iter().zip(cells).enumerate() {
        let (cell, width) = (cell.as_ref(), column.width);
        if index > 0 {
            line.push_str("  ");
        }
        let last = index + 1 == columns.len();
        let _ = match column.align {
            Align::Left if last => write!(line, "{cell}"),
            Align::Left => write!(line, "{cell:<width$}"),
            Align::Right => write!(line, "{cell:>width$}"),
        };
    }
    line.truncate(line.trim_end().len());
    line
}

/// Set once stdout failed for a reason other than a closed pipe.
static OUTPUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether writing the results failed (other than on a closed pipe): the run then exits 1.
pub fn output_failed() -> bool {
    OUTPUT_FAILED.load(Ordering::Relaxed)
}

/// Writes `text` (whole lines) to stdout, flushed at once.
fn write_out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => {}
        // A closed pipe (woolctl ... | head) ends the output, not the program's decisions.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(error) => {
            if !OUTPUT_FAILED.swap(true, Ordering::Relaxed) {
                eprintln!("woolctl: cannot write the results: {error}");
            }
        }
    }
}

/// An error as JSON: `{"kind": "transient", "code": 14, "message": "..."}` (`code`, the gRPC
/// status code, is `null` for errors that have none); as text (a table cell), the error's own
/// message.
pub struct ErrorFields<'a>(pub &'a Error);

impl Serialize for ErrorFields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("kind", self.0.kind().as_str())?;
        map.serialize_entry("code", &self.0.code().map(|c| c as i32))?;
        map.serialize_entry("message", self.0.message())?;
        map.end()
    }
}

impl std::fmt::Display for ErrorFields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.0, f)
    }
}

/// How a row names its worker in JSON (flattened into the row): `target`, and `uid` when the
/// worker was discovered.
pub struct Named<'a>(pub &'a Member);

impl Named<'_> {
    /// The target the worker is dialled at (a table's `TARGET` cell).
    pub fn target(&self) -> &str {
        &self.0.target
    }
}

impl Serialize for Named<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("target", &self.0.target)?;
        if let Some(worker) = &self.0.discovered {
            map.serialize_entry("uid", &worker.uid)?;
        }
        map.end()
    }
}

/// Idle seconds in JSON (`serialize_with`): rounded to the microsecond, the precision of the
/// worker's clock readings that matters (`1.166941`, not `1.1669408350000001`); `null` when there
/// are none.
pub fn micros<S: Serializer>(seconds: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match seconds {
        Some(seconds) if seconds.is_finite() => {
            serializer.serialize_f64((seconds * 1e6).round() / 1e6)
        }
        Some(seconds) => serializer.serialize_f64(*seconds),
        None => serializer.serialize_none(),
    }
}

/// A table cell for idle seconds: three decimals, or `-` when there are none (the poll
/// failed).
pub fn seconds_cell(seconds: Option<f64>) -> String {
    match seconds {
        Some(seconds) => format!("{seconds:.3}"),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_padded_to_their_widths_and_the_last_left_one_is_not() {
        let columns = [
            Column::left("A", 4),
            Column::right("B", 5),
            Column::left("C", 6),
        ];
        assert_eq!(
            table_line(&columns, &["x", "1.5", "end"]),
            "x       1.5  end"
        );
        assert_eq!(
            table_line(&columns, &["longer", "1", ""]),
            "longer      1",
            "no trailing blanks when the last cell is empty"
        );
    }

    #[test]
    fn idle_seconds_are_rounded_to_the_microsecond_in_json() {
        #[derive(Serialize)]
        struct Seconds(#[serde(serialize_with = "micros")] Option<f64>);
        for (seconds, json) in [
            (Some(1.1669408350000001), "1.166941"),
            (Some(0.0), "0.0"),
            (Some(2.5e-7), "0.0"),
            (Some(86400.1234564), "86400.123456"),
            (None, "null"),
        ] {
            assert_eq!(serde_json::to_string(&Seconds(seconds)).unwrap(), json);
        }
    }
}
