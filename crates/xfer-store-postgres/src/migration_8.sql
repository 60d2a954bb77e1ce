-- xfer's PostgreSQL shard, migration 8: the asset catalog (`Store::declare_asset`), kept
-- by a cluster's first shard. A code is declared once with its scale and never changed;
-- codes are compared byte-wise (COLLATE "C"), so `assets` lists them in the other stores'
-- order.
CREATE TABLE assets (
    code  text COLLATE "C" PRIMARY KEY,
    scale smallint NOT NULL CHECK (scale BETWEEN 0 AND 18)
);
