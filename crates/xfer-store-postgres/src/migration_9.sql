-- xfer's PostgreSQL shard, migration 9: account metadata (`Store::set_account_metadata`),
-- a small map of text per account kept beside its record, never read or written by a
-- protocol step. A row is the account's whole map as a jsonb object of strings; an
-- account without metadata has no row. Ids are compared byte-wise (COLLATE "C"), so the
-- filter lists them in the other stores' order; the GIN index serves its `@>`.
CREATE TABLE account_metadata (
    account  text COLLATE "C" PRIMARY KEY,
    metadata jsonb NOT NULL CHECK (jsonb_typeof(metadata) = 'object')
);
CREATE INDEX account_metadata_pairs ON account_metadata USING gin (metadata jsonb_path_ops);
