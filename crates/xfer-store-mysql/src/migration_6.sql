-- xfer's MySQL/MariaDB shard, migration 6: account metadata
-- (`Store::set_account_metadata`), a small map of text per account kept beside its record,
-- never read or written by a protocol step. A row is the account's whole map as JSON text
-- (an object of strings, in utf8mb4 whatever the database's default; LONGTEXT as in
-- migration 3, which MariaDB's JSON is too); an account without metadata has no row. Ids
-- are ASCII compared byte-wise (`ascii_bin`, as `accounts.id`), so the filter lists them
-- in the other stores' order. Statements end with a line holding only `;;`, as in
-- migration 1.
CREATE TABLE account_metadata (
    account  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    metadata LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
        CHECK (JSON_VALID(metadata))
) ENGINE = InnoDB
;;
