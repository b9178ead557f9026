//! The query handle, and the one way rows become values: [`FromRow`] and the `select` helpers.

use rusqlite::{Connection, Params, Row};

use super::StoreError;

/// Queries over a connection; inside [`super::Store::write`] they all share one transaction.
pub struct Db<'c> {
    pub(super) conn: &'c Connection,
}

/// A value read from one row of a `SELECT`.
pub(super) trait FromRow: Sized {
    /// What stands between `SELECT` and `FROM`: the columns [`FromRow::from_row`] reads, in order.
    const COLUMNS: &'static str;

    /// Fails on SQL (a column of another type) or on a value this version cannot read.
    fn from_row(row: &Row<'_>) -> Result<Self, StoreError>;
}

impl<'c> Db<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Self { conn }
    }

    /// Runs `read` in one read transaction (a savepoint, so that it nests in a write): its queries
    /// all see the store as it was at the first, and the file's locks are taken once, not once a
    /// query (which, over thousands of workflows, cost more than the queries).
    pub fn reading<T>(
        &self,
        read: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.execute("SAVEPOINT reading", [])?;
        let result = read(self);
        // Released whether the read failed or not; nothing was written, so nothing is committed.
        let released = self.execute("RELEASE reading", []);
        let value = result?;
        released?;
        Ok(value)
    }

    /// Runs one statement, prepared once per connection: the engine writes the same few statements
    /// for every log it reads, every pass, and parsing one costs more than running it.
    pub(super) fn execute(&self, sql: &str, params: impl Params) -> Result<usize, rusqlite::Error> {
        self.conn.prepare_cached(sql)?.execute(params)
    }

    /// The one row `sql` gives, through `map`, with the statement prepared once (see [`Db::execute`]).
    pub(super) fn query_row<T>(
        &self,
        sql: &str,
        params: impl Params,
        map: impl FnOnce(&Row<'_>) -> Result<T, rusqlite::Error>,
    ) -> Result<T, rusqlite::Error> {
        self.conn.prepare_cached(sql)?.query_row(params, map)
    }

    /// Every row of `SELECT <T's columns> <tail>`, in the order the query gives them.
    pub(super) fn select<T: FromRow>(
        &self,
        tail: &str,
        params: impl Params,
    ) -> Result<Vec<T>, StoreError> {
        self.select_rows(
            &format!("SELECT {} {tail}", T::COLUMNS),
            params,
            T::from_row,
        )
    }

    /// The first row of `SELECT <T's columns> <tail>`, if there is one.
    pub(super) fn select_one<T: FromRow>(
        &self,
        tail: &str,
        params: impl Params,
    ) -> Result<Option<T>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {} {tail}", T::COLUMNS))?;
        let mut rows = stmt.query(params)?;
        rows.next()?.map(T::from_row).transpose()
    }

    /// Every row of `sql` through `map`: for rows that are not one value of a type (pairs, counts).
    pub(super) fn select_rows<T>(
        &self,
        sql: &str,
        params: impl Params,
        mut map: impl FnMut(&Row<'_>) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        // Cached: a reader that goes workflow by workflow (status, a workflow's history) runs the same
        // few dozen statements thousands of times, and preparing one costs more than running it.
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut rows = stmt.query(params)?;
        let mut values = Vec::new();
        while let Some(row) = rows.next()? {
            values.push(map(row)?);
        }
        Ok(values)
    }
}
