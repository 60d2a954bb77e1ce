//! What the simulated clients ask for. One generator covers every workload the issue names:
//! uniform and hot (debit-hot, credit-hot) transfers, multi-asset multi-posting transfers
//! across shards, a flash sale (stock plus cash in one transfer), holds with capture, void
//! and expiry, refunds (and second refunds of the same original), account closes, accounts
//! created late, and duplicate submissions of the same id with the same and with a
//! different body. It also keeps what clients were told, for the checkers.

use crate::config::{Hotness, SimConfig};
use std::collections::BTreeMap;
use xfer_core::{
    AccountId, Amount, AssetCode, LowerBound, Posting, Rng, Timestamp, TransferId, TransferKind,
    TransferSpec, TransferState,
};

/// Something a client asks an executor process to do.
#[derive(Clone, Debug)]
pub enum Action {
    /// Submit a transfer (new, duplicate, refund or hold).
    Submit(TransferSpec),
    /// Capture a hold.
    Capture(TransferId),
    /// Capture these amounts of a hold, one per posting.
    CapturePart(TransferId, Vec<Amount>),
    /// Void a hold.
    Void(TransferId),
    /// Move a hold's expiry from `from` (as the client was told) later, to `until`.
    Extend {
        /// The hold.
        id: TransferId,
        /// Its expiry as the client knows it.
        from: Timestamp,
        /// The new one.
        until: Timestamp,
    },
    /// Create an account.
    Create(AccountId, AssetCode, LowerBound),
    /// Close an account.
    Close(AccountId),
}

/// What a client was told about one submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Told {
    /// The transfer ended in this state (done, canceled) or is held.
    State(TransferState),
    /// Refused with this code.
    Rejected(xfer_core::Code),
    /// No answer: the process died or gave up; the outcome is unknown to the client.
    Unknown,
}

/// One submission of an id and what came of it.
#[derive(Clone, Debug)]
pub struct Submission {
    /// What was sent.
    pub spec: TransferSpec,
    /// What the client heard, if anything yet.
    pub told: Option<Told>,
}

/// The simulated clients.
pub struct Workload {
    rng: Rng,
    usd: AssetCode,
    points: AssetCode,
    sku: AssetCode,
    users: Vec<AccountId>,
    points_users: Vec<AccountId>,
    hot: AccountId,
    hotness: Hotness,
    late: Vec<AccountId>,
    timeout_ms: (u64, u64),
    next_id: u64,
    recent: Vec<TransferSpec>,
    done: Vec<TransferSpec>,
    /// A second partial refund of the original the last one refunds, sent next: the two
    /// together usually take back more than it moved.
    rival_refund: Option<TransferSpec>,
    /// Every submission, by id.
    pub submissions: BTreeMap<TransferId, Vec<Submission>>,
    /// Transfers generated (including duplicates and refunds).
    pub transfers: u64,
}

fn id(s: &str) -> AccountId {
    AccountId::new(s).expect("simulator ids are valid")
}

fn asset(s: &str) -> AssetCode {
    AssetCode::new(s, "asset").expect("simulator assets are valid")
}

impl Workload {
    /// The clients of `cfg`, drawing from `rng`.
    pub fn new(cfg: &SimConfig, rng: Rng) -> Workload {
        Workload {
            rng,
            usd: asset("USD"),
            points: asset("POINTS"),
            sku: asset("SKU-1"),
            users: (0..cfg.users).map(|i| id(&format!("cash:u{i}"))).collect(),
            points_users: (0..cfg.users)
                .map(|i| id(&format!("points:u{i}")))
                .collect(),
            hot: id("cash:hot"),
            hotness: cfg.hotness,
            late: (0..3).map(|i| id(&format!("cash:late{i}"))).collect(),
            timeout_ms: cfg.timeout_ms,
            next_id: 0,
            recent: Vec::new(),
            done: Vec::new(),
            rival_refund: None,
            submissions: BTreeMap::new(),
            transfers: 0,
        }
    }

    /// The accounts that exist before the run starts, with their bounds.
    pub fn initial_accounts(&self) -> Vec<(AccountId, AssetCode, LowerBound)> {
        let mut out = vec![
            (id("issuer:USD"), self.usd.clone(), LowerBound::Unbounded),
            (
                id("issuer:POINTS"),
                self.points.clone(),
                LowerBound::Unbounded,
            ),
            (id("issuer:SKU-1"), self.sku.clone(), LowerBound::Unbounded),
            (id("cash:merchant"), self.usd.clone(), LowerBound::default()),
            (
                id("points:merchant"),
                self.points.clone(),
                LowerBound::default(),
            ),
            (id("stock:sku1"), self.sku.clone(), LowerBound::default()),
            (id("stock:sold"), self.sku.clone(), LowerBound::default()),
            (self.hot.clone(), self.usd.clone(), LowerBound::default()),
            (
                id("cash:credit-line"),
                self.usd.clone(),
                LowerBound::Bounded(-500),
            ),
        ];
        out.extend(
            self.users
                .iter()
                .map(|u| (u.clone(), self.usd.clone(), LowerBound::default())),
        );
        out.extend(
            self.points_users
                .iter()
                .map(|u| (u.clone(), self.points.clone(), LowerBound::default())),
        );
        out
    }

    /// The transfers that fund the initial accounts from the issuers.
    pub fn funding(&mut self) -> Vec<TransferSpec> {
        let mut out = Vec::new();
        let users: Vec<_> = self.users.clone();
        for u in &users {
            let amount = self.rng.range(20_000, 100_000);
            out.push(self.spec(
                vec![self.posting("issuer:USD", u, &self.usd.clone(), amount)],
                5_000,
            ));
        }
        for u in &self.points_users.clone() {
            let amount = self.rng.range(5_000, 50_000);
            out.push(self.spec(
                vec![self.posting("issuer:POINTS", u, &self.points.clone(), amount)],
                5_000,
            ));
        }
        let stock = self.rng.range(50, 400);
        out.push(self.spec(
            vec![self.posting("issuer:SKU-1", &id("stock:sku1"), &self.sku.clone(), stock)],
            5_000,
        ));
        let hot = if self.hotness == Hotness::DebitHot {
            10_000_000
        } else {
            1_000
        };
        out.push(self.spec(
            vec![self.posting("issuer:USD", &self.hot.clone(), &self.usd.clone(), hot)],
            5_000,
        ));
        for s in &out {
            self.record(s);
        }
        out
    }

    fn posting(&self, from: &str, to: &AccountId, asset: &AssetCode, amount: u64) -> Posting {
        Posting {
            from: id(from),
            to: to.clone(),
            asset: asset.clone(),
            amount: Amount::new(amount, "amount").expect("positive"),
        }
    }

    fn move_(&self, from: &AccountId, to: &AccountId, asset: &AssetCode, amount: u64) -> Posting {
        Posting {
            from: from.clone(),
            to: to.clone(),
            asset: asset.clone(),
            amount: Amount::new(amount, "amount").expect("positive"),
        }
    }

    fn spec(&mut self, postings: Vec<Posting>, timeout_ms: u64) -> TransferSpec {
        self.next_id += 1;
        TransferSpec {
            id: TransferId::new(&format!("t{}", self.next_id)).expect("valid"),
            postings: postings.into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms,
        }
    }

    fn record(&mut self, spec: &TransferSpec) {
        self.transfers += 1;
        self.submissions
            .entry(spec.id.clone())
            .or_default()
            .push(Submission {
                spec: spec.clone(),
                told: None,
            });
        self.recent.push(spec.clone());
        if self.recent.len() > 32 {
            self.recent.remove(0);
        }
    }

    fn pick<'a>(&mut self, from: &'a [AccountId]) -> &'a AccountId {
        &from[self.rng.below(from.len() as u64) as usize]
    }

    fn two_users(&mut self) -> (AccountId, AccountId) {
        let users = self.users.clone();
        let a = self.pick(&users).clone();
        loop {
            let b = self.pick(&users).clone();
            if b != a {
                return (a, b);
            }
        }
    }

    fn amount(&mut self) -> u64 {
        if self.rng.chance(30_000) {
            self.rng.range(1_000_000, 10_000_000) // more than anyone has: refused
        } else {
            self.rng.range(1, 300)
        }
    }

    fn timeout(&mut self) -> u64 {
        if self.rng.chance(200_000) {
            self.rng.range(self.timeout_ms.0, 300) // shorter than a lease: deadline races
        } else {
            self.rng.range(self.timeout_ms.0, self.timeout_ms.1)
        }
    }

    /// The next client action.
    pub fn next_action(&mut self) -> Action {
        if let Some(spec) = self.rival_refund.take() {
            self.record(&spec);
            return Action::Submit(spec);
        }
        let roll = self.rng.below(100);
        let (usd, points, sku) = (self.usd.clone(), self.points.clone(), self.sku.clone());
        let postings = match roll {
            0..=44 => {
                let (mut a, mut b) = self.two_users();
                let hot = self.rng.chance(900_000);
                match self.hotness {
                    Hotness::DebitHot if hot => a = self.hot.clone(),
                    Hotness::CreditHot if hot => b = self.hot.clone(),
                    _ => {}
                }
                let amount = self.amount();
                vec![self.move_(&a, &b, &usd, amount)]
            }
            45..=54 => {
                // Points plus cash: one payment from two assets, usually on two shards.
                let i = self.rng.below(self.users.len() as u64) as usize;
                let (cash, pts) = (self.amount(), self.rng.range(1, 200));
                vec![
                    self.move_(&self.users[i].clone(), &id("cash:merchant"), &usd, cash),
                    self.move_(
                        &self.points_users[i].clone(),
                        &id("points:merchant"),
                        &points,
                        pts,
                    ),
                ]
            }
            55..=64 => {
                // Flash sale: one item of stock and its price, all or nothing.
                let users = self.users.clone();
                let buyer = self.pick(&users).clone();
                let price = self.rng.range(50, 400);
                vec![
                    self.move_(&id("stock:sku1"), &id("stock:sold"), &sku, 1),
                    self.move_(&buyer, &id("cash:merchant"), &usd, price),
                ]
            }
            65..=74 => return self.refund(),
            75..=82 if !self.recent.is_empty() => {
                let spec = self.recent[self.rng.below(self.recent.len() as u64) as usize].clone();
                self.record(&spec);
                return Action::Submit(spec);
            }
            83..=84 if !self.recent.is_empty() => {
                let mut spec =
                    self.recent[self.rng.below(self.recent.len() as u64) as usize].clone();
                spec.metadata.push_str("changed");
                self.record(&spec);
                return Action::Submit(spec);
            }
            85 => {
                // Closes hit the accounts created late, which transfers also use.
                let late = self.late.clone();
                return Action::Close(self.pick(&late).clone());
            }
            86..=87 => {
                let late = self.late.clone();
                return Action::Create(self.pick(&late).clone(), usd, LowerBound::default());
            }
            88..=91 => {
                let late = self.late.clone();
                let l = self.pick(&late).clone();
                let (a, _) = self.two_users();
                let amount = self.amount();
                if self.rng.chance(500_000) {
                    vec![self.move_(&a, &l, &usd, amount)]
                } else {
                    vec![self.move_(&l, &a, &usd, amount)]
                }
            }
            92..=93 => {
                let (a, _) = self.two_users();
                let amount = self.rng.range(1, 400);
                vec![self.move_(&id("cash:credit-line"), &a, &usd, amount)]
            }
            _ => {
                // A chain: one account on both sides, one intent with a debit and a credit.
                let (a, b) = self.two_users();
                let (_, c) = self.two_users();
                let x = self.amount();
                let mut v = vec![self.move_(&a, &b, &usd, x)];
                if c != b {
                    let y = self.rng.range(1, 300);
                    v.push(self.move_(&b, &c, &usd, y));
                }
                v
            }
        };
        let timeout = self.timeout();
        let mut spec = self.spec(postings, timeout);
        if self.rng.chance(200_000) {
            let ttl = timeout + self.rng.range(100, 1_500);
            spec.kind = TransferKind::Hold { ttl_ms: ttl };
        }
        self.record(&spec);
        Action::Submit(spec)
    }

    fn refund(&mut self) -> Action {
        if self.done.is_empty() {
            return self.next_action();
        }
        let original = self.done[self.rng.below(self.done.len() as u64) as usize].clone();
        // Half are whole, half partial; a partial one is often followed by a rival.
        let partial = self.rng.below(2) == 0;
        let spec = self.refund_of(&original, partial);
        if partial && self.rng.below(2) == 0 {
            self.rival_refund = Some(self.refund_of(&original, true));
        }
        self.record(&spec);
        Action::Submit(spec)
    }

    /// A refund of `original`: whole, or of more than half of each posting.
    fn refund_of(&mut self, original: &TransferSpec, partial: bool) -> TransferSpec {
        let mut postings = original.reversed_postings();
        if partial {
            for p in &mut postings {
                let whole = p.amount.units();
                let part = self.rng.range(whole.div_ceil(2), whole);
                p.amount = Amount::new(part, "amount").expect("at least 1");
            }
        }
        let timeout = self.timeout();
        let mut spec = self.spec(postings, timeout);
        spec.refund_of = Some(original.id.clone());
        spec
    }

    /// What a client does after its hold was acknowledged as held, expiring at `expires`:
    /// capture (whole, or in part: now and then asking more than a posting holds), void,
    /// extend (then capture between the two expiries), or let it expire; and after how long.
    pub fn after_held(
        &mut self,
        spec: &TransferSpec,
        ttl_ms: u64,
        expires: Timestamp,
    ) -> Option<(u64, Action)> {
        let id = &spec.id;
        let delay = self.rng.range(1, ttl_ms + 200);
        match self.rng.below(10) {
            0..=2 => Some((delay, Action::Capture(id.clone()))),
            3 | 4 => {
                let too_much = self.rng.below(10) == 0;
                let amounts = spec
                    .postings
                    .iter()
                    .map(|p| {
                        let held = p.amount.units();
                        let part = match too_much {
                            true => held + 1,
                            false => self.rng.range(1, held),
                        };
                        Amount::new(part, "amount").expect("at least 1")
                    })
                    .collect();
                Some((delay, Action::CapturePart(id.clone(), amounts)))
            }
            5..=7 => Some((delay, Action::Void(id.clone()))),
            8 => {
                let action = Action::Extend {
                    id: id.clone(),
                    from: expires,
                    until: expires.plus_ms(ttl_ms),
                };
                Some((self.rng.range(1, ttl_ms / 2), action))
            }
            _ => None,
        }
    }

    /// Notes what the client of the `n`th submission of `id` was told.
    pub fn told(&mut self, id: &TransferId, n: usize, told: Told) {
        if let Some(s) = self.submissions.get_mut(id).and_then(|v| v.get_mut(n)) {
            if told == Told::State(TransferState::Done) && s.spec.refund_of.is_none() {
                self.done.push(s.spec.clone());
            }
            s.told = Some(told);
        }
    }

    /// Records a client sending `spec` again (after losing its answer); returns the new
    /// submission's index.
    pub fn resubmit(&mut self, spec: &TransferSpec) -> usize {
        self.record(spec);
        self.submission_count(&spec.id) - 1
    }

    /// How many submissions of `id` there have been.
    pub fn submission_count(&self, id: &TransferId) -> usize {
        self.submissions.get(id).map_or(0, |v| v.len())
    }

    /// A chance draw from the workload's generator.
    pub fn chance(&mut self, per_million: u32) -> bool {
        self.rng.chance(per_million)
    }
}
