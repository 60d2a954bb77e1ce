-- xfer's MySQL/MariaDB shard, migration 5: the asset catalog (`Store::declare_asset`), kept
-- by a cluster's first shard. A code is declared once with its scale and never changed;
-- codes are ASCII compared byte-wise (`ascii_bin`), so `assets` lists them in the other
-- stores' order. Statements end with a line holding only `;;`, as in migration 1.
CREATE TABLE assets (
    code  VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    scale TINYINT NOT NULL CHECK (scale BETWEEN 0 AND 18)
) ENGINE = InnoDB
;;
