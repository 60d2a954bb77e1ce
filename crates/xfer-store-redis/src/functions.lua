#!lua name=xfer_7
-- xfer's Redis shard: every protocol step as one server-side function on one record.
--
-- Loaded once per server (FUNCTION LOAD REPLACE when a store opens). A function runs
-- atomically on the server, so the step's check and its write are one step next to the
-- data, never a read followed by a conditional write from the client. Every key a call
-- touches is passed in KEYS and carries the shard's hash tag `{prefix}`, so a record and the
-- shard's indexes sit in one Cluster slot.
--
-- The library's name (and its functions') carries its version: when a step's arguments or
-- rules change it takes the next one (xfer_5: captures and posts in part, refunds judged
-- against what was captured; xfer_6: escalation marks, and re-drives that clear them;
-- xfer_7: history as lists, records without `rev`), so a process still running older code,
-- which loads its own library when it opens, never replaces this one under a newer process.
--
-- The rules are those of `xfer_store::record` (Rust), which the Memory store runs directly;
-- the conformance suite holds this file to them.
--
-- Layout of one shard (see `keys.rs`):
--   {p}:a:<account>   hash: asset, balance, reserved, incoming, lower (absent: unbounded),
--                     status (open | closed | unopened), and one field per intent,
--                     i:<transfer> = "<state> <debit> <credit> <horizon>"
--   {p}:h:<account>   list: the account's history, transfer ids oldest first; an entry's
--                     position from 1 is its cursor (xfer_6 and older kept a sorted set,
--                     "<seq> <transfer>" scored by a shard-wide counter `{p}:seq`, which
--                     `history_to_list` turns into the list when a store opens)
--   {p}:t:<transfer>  hash: spec (JSON), rev (in records written by xfer_6 and older: the
--                     reversed postings, JSON; derived from spec since), state, created,
--                     updated, deadline, hold, owner, lease, epoch, reason (JSON),
--                     refunded_by (absent fields: none), refunds (the refund links,
--                     `RefundLink`s as JSON, oldest first; absent: none, and in a record
--                     written before partial refunds with refunded_by set, its one refund
--                     of everything), tl (the timeline: its steps as JSON, timeline.rs;
--                     absent in a record written before it: derived), tn (how many steps
--                     tl holds), tp (a one-phase commit's with no tl yet: its
--                     timeline's first step's state and owner, "<state> <owner>"; the
--                     timeline is that step and the finish's, both at its creation),
--                     captured (of a hold captured in part, each posting's
--                     captured amount, a JSON array of integers; absent: all of each),
--                     escalation (`Escalation`'s JSON, only stored; absent: none)
--   {p}:accounts, {p}:transfers   sorted sets of ids (score 0: byte order, for paging)
--   {p}:due           sorted set: non-terminal transfers scored by their wake time
--   {p}:tombs         sorted set: "<account> <transfer>" of every tombstone, by horizon
--   {p}:layout        '7' once a store has brought older data to this layout
--   {p}:events        stream: the change feed (event.rs), one entry per event,
--                     t (transfer), k (kind), at (ms), r (refund, for 'refunded'); its entry
--                     ids are the events' positions; retention (`trim_events`) drops the
--                     oldest
--   {p}:events_dropped the id of the last event retention dropped (absent: none)

local NEVER = '9223372036854775807'

-- Exact signed integers as decimal strings ("-12", "0", "345"). Lua numbers are doubles,
-- exact only below 2^53, and balances reach 2^63: every sum and comparison of amounts goes
-- through these. Operands of at most 15 characters (|x| < 10^15) are added and compared as
-- doubles, exactly (their sum stays below 2^53); longer ones in limbs of seven digits.
-- Timestamps (milliseconds, below 2^53 for any real clock) are compared as numbers.
local W, BASE = 7, 10000000
local I64_MIN, I64_MAX = '-9223372036854775808', NEVER

local function corrupt(what)
  error({ err = 'XFERCORRUPT ' .. what })
end

local function int(s, what)
  if type(s) ~= 'string' or not string.match(s, '^%-?%d+$') then
    corrupt(what .. ' is not an integer: ' .. tostring(s))
  end
  return s
end

local function split(x)
  if string.byte(x, 1) == 45 then
    return -1, string.sub(x, 2)
  end
  return 1, x
end

local function ucmp(a, b)
  if #a ~= #b then
    return (#a < #b) and -1 or 1
  end
  if a == b then
    return 0
  end
  return (a < b) and -1 or 1
end

local function limb(s, i)
  if i <= 0 then
    return 0
  end
  return tonumber(string.sub(s, math.max(1, i - W + 1), i))
end

-- Limbs, least significant first, back to digits without leading zeros.
local function join(limbs)
  local n = #limbs
  while n > 1 and limbs[n] == 0 do
    n = n - 1
  end
  local parts = { string.format('%d', limbs[n]) }
  for k = n - 1, 1, -1 do
    parts[#parts + 1] = string.format('%07d', limbs[k])
  end
  return table.concat(parts)
end

local function uadd(a, b)
  local limbs, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local s = limb(a, i) + limb(b, j) + carry
    if s >= BASE then
      carry, s = 1, s - BASE
    else
      carry = 0
    end
    limbs[#limbs + 1] = s
    i, j = i - W, j - W
  end
  return join(limbs)
end

-- a - b for a >= b.
local function usub(a, b)
  local limbs, borrow, i, j = {}, 0, #a, #b
  while i > 0 do
    local s = limb(a, i) - limb(b, j) - borrow
    if s < 0 then
      borrow, s = 1, s + BASE
    else
      borrow = 0
    end
    limbs[#limbs + 1] = s
    i, j = i - W, j - W
  end
  return join(limbs)
end

local SHORT = 15

local function add(x, y)
  if #x <= SHORT and #y <= SHORT then
    return string.format('%d', tonumber(x) + tonumber(y))
  end
  local sx, a = split(x)
  local sy, b = split(y)
  local sign, r
  if sx == sy then
    sign, r = sx, uadd(a, b)
  else
    local c = ucmp(a, b)
    if c == 0 then
      return '0'
    elseif c > 0 then
      sign, r = sx, usub(a, b)
    else
      sign, r = sy, usub(b, a)
    end
  end
  if sign < 0 and r ~= '0' then
    return '-' .. r
  end
  return r
end

local function neg(x)
  if x == '0' then
    return '0'
  elseif string.byte(x, 1) == 45 then
    return string.sub(x, 2)
  end
  return '-' .. x
end

local function sub(x, y)
  return add(x, neg(y))
end

local function cmp(x, y)
  if #x <= SHORT and #y <= SHORT then
    local a, b = tonumber(x), tonumber(y)
    if a == b then
      return 0
    end
    return (a < b) and -1 or 1
  end
  local sx, a = split(x)
  local sy, b = split(y)
  if sx ~= sy then
    return (sx < sy) and -1 or 1
  end
  local c = ucmp(a, b)
  if sx > 0 then
    return c
  end
  return -c
end

local function fits(x)
  -- At most 15 characters is within a bigint (and the comparisons below take the long
  -- path, their bounds having 19 digits).
  return #x <= SHORT or (cmp(x, I64_MIN) >= 0 and cmp(x, I64_MAX) <= 0)
end

-- The store's clock: the server's, in milliseconds since the Unix epoch.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ms(s, what)
  local n = tonumber(s)
  if not n then
    corrupt(what .. ' is not a timestamp: ' .. tostring(s))
  end
  return n
end

-- ---------------------------------------------------------------------------------------
-- Accounts. KEYS: the account, its history, the account index, the tombstone index. ARGV:
-- the step, the account id, the step's arguments (see `wire.rs`).

local function intent_of(v, key)
  local state, debit, credit, horizon = string.match(v, '^(%a+) (%d+) (%d+) (%-?%d+)$')
  if not state then
    corrupt('intent ' .. v .. ' in ' .. key)
  end
  return state, debit, credit, horizon
end

local function account_reply(key)
  local flat = redis.call('HGETALL', key)
  table.insert(flat, 1, 'account')
  return flat
end

local function has_open_intent(key)
  local flat = redis.call('HGETALL', key)
  for n = 1, #flat, 2 do
    if string.sub(flat[n], 1, 2) == 'i:' and string.sub(flat[n + 1], 1, 5) == 'open ' then
      return true
    end
  end
  return false
end

local function has_intents(key)
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'i:' then
      return true
    end
  end
  return false
end

local function sums(key)
  local a = redis.call('HMGET', key, 'balance', 'reserved', 'incoming')
  return int(a[1], key .. ' balance'), int(a[2], key .. ' reserved'), int(a[3], key .. ' incoming')
end

-- What the prepare's rules read of an account, in one call: its status, the intent or
-- tombstone of `tid`, asset, lower, balance, reserved, incoming.
local function prepare_fields(key, tid)
  return redis.call('HMGET', key, 'status', 'i:' .. tid, 'asset', 'lower', 'balance',
    'reserved', 'incoming')
end

-- The prepare's rules (record.rs `prepare_check`) on an account that exists, read by
-- `prepare_fields` as `f`, at the store's clock `now`: nil, its new reserved and incoming
-- sums and its balance once the intent is posted whole, if a prepare of `debit` and
-- `credit` would succeed, else the answer the prepare gives (having changed nothing). An
-- existing intent or tombstone answers first, then the deadline, then the rules.
local function prepare_check(key, f, asset, debit, credit, deadline, now)
  local status, v = f[1], f[2]
  if v then
    local state = intent_of(v, key)
    if state == 'open' then
      return { 'prepare', 'already_prepared' }
    elseif state == 'posted' then
      return { 'prepare', 'already_posted' }
    end
    return { 'prepare', 'already_released' }
  end
  if now >= ms(deadline, 'deadline') then
    return { 'prepare', 'too_late' }
  end
  if status == 'closed' then
    return { 'prepare', 'refused', 'account_closed' }
  elseif status == 'unopened' then
    return { 'prepare', 'refused', 'account_not_found' }
  end
  if f[3] ~= asset then
    return { 'prepare', 'refused', 'asset_mismatch' }
  end
  local b, r, i, lower = f[5], f[6], f[7], f[4]
  if #b <= SHORT and #r <= SHORT and #i <= SHORT and #debit <= SHORT and #credit <= SHORT
    and (not lower or #lower <= SHORT) then
    -- Every operand below 10^15 in size: each sum below stays under 2^53, exact as a
    -- double, and within an i64, so it needs neither limbs nor the overflow checks.
    local bal, res, inc = tonumber(b), tonumber(r), tonumber(i)
    local d, c, low = tonumber(debit), tonumber(credit), lower and tonumber(lower)
    if not (bal and res and inc and d and c) or (lower and not low) then
      corrupt('sums of ' .. key .. ': ' .. b .. ' ' .. r .. ' ' .. i .. ' ' .. (lower or ''))
    end
    if low and d > bal - res - low then
      return { 'prepare', 'refused', 'exceeds_available' }
    end
    return nil, string.format('%d', res + d), string.format('%d', inc + c),
      string.format('%d', bal + c - d)
  end
  local bal = int(b, key .. ' balance')
  local res, inc = int(r, key .. ' reserved'), int(i, key .. ' incoming')
  if lower and cmp(debit, sub(sub(bal, res), int(lower, key .. ' lower'))) > 0 then
    return { 'prepare', 'refused', 'exceeds_available' }
  end
  -- Every number the record will ever hold must fit an i64 (see record.rs).
  local res2, inc2 = add(res, debit), add(inc, credit)
  if not (fits(res2) and fits(inc2) and fits(sub(bal, res2)) and fits(add(bal, inc2))) then
    return { 'prepare', 'refused', 'balance_would_overflow' }
  end
  return nil, res2, inc2, add(bal, sub(credit, debit))
end

local function account(keys, args)
  local key, hist, index, tombs = keys[1], keys[2], keys[3], keys[4]
  local k, aid = args[1], args[2]
  local status = redis.call('HGET', key, 'status')

  if k == 'create' then
    local asset, lower = args[3], args[4] -- lower '': unbounded
    if not status then
      redis.call('HSET', key, 'asset', asset, 'balance', '0', 'reserved', '0',
        'incoming', '0', 'status', 'open')
      if lower ~= '' then
        redis.call('HSET', key, 'lower', lower)
      end
      redis.call('ZADD', index, 0, aid)
      return account_reply(key)
    elseif status == 'unopened' then
      -- Keep the tombstones: a late prepare must still find them.
      redis.call('HSET', key, 'status', 'open', 'asset', asset)
      if lower ~= '' then
        redis.call('HSET', key, 'lower', lower)
      else
        redis.call('HDEL', key, 'lower')
      end
      return account_reply(key)
    end
    local a = redis.call('HMGET', key, 'asset', 'lower')
    if a[1] == asset and (a[2] or '') == lower then
      return account_reply(key)
    end
    return { 'refused', 'account_exists_with_different_body' }
  end

  if k == 'release' then
    local tid, asset, horizon = args[3], args[4], args[5]
    local member = aid .. ' ' .. tid
    if not status then
      -- A release may reach an account nobody created yet: it leaves a placeholder that
      -- holds the released mark, so a prepare arriving after the creation finds it.
      redis.call('HSET', key, 'asset', asset, 'balance', '0', 'reserved', '0', 'incoming', '0',
        'lower', '0', 'status', 'unopened', 'i:' .. tid, 'released 0 0 ' .. horizon)
      redis.call('ZADD', index, 0, aid)
      redis.call('ZADD', tombs, horizon, member)
      return { 'release', 'marked' }
    end
    local v = redis.call('HGET', key, 'i:' .. tid)
    if not v then
      redis.call('HSET', key, 'i:' .. tid, 'released 0 0 ' .. horizon)
      redis.call('ZADD', tombs, horizon, member)
      -- The account's first write for the transfer lists it; past the horizon an earlier
      -- tombstone may have been pruned (a repeat), so it lists nothing (see record.rs).
      if status ~= 'unopened' and now_ms() < ms(horizon, 'horizon') then
        redis.call('RPUSH', hist, tid)
      end
      return { 'release', 'marked' }
    end
    local state, debit, credit, h = intent_of(v, key)
    if state == 'released' then
      return { 'release', 'already_released' }
    elseif state == 'posted' then
      return { 'release', 'found_posted' }
    end
    local _, res, inc = sums(key)
    redis.call('HSET', key, 'reserved', sub(res, debit), 'incoming', sub(inc, credit),
      'i:' .. tid, 'released ' .. debit .. ' ' .. credit .. ' ' .. h)
    redis.call('ZADD', tombs, h, member)
    return { 'release', 'released' }
  end

  if k == 'prune' then
    -- Drops one tombstone the index says is due, if the record agrees; a placeholder left
    -- with no intents goes too.
    local tid, now = args[3], now_ms()
    local member = aid .. ' ' .. tid
    if not status then
      redis.call('ZREM', tombs, member)
      return { 'pruned', '0' }
    end
    local dropped = '0'
    local v = redis.call('HGET', key, 'i:' .. tid)
    if not v then
      redis.call('ZREM', tombs, member)
    else
      local state, _, _, h = intent_of(v, key)
      if state ~= 'open' and ms(h, key .. ' horizon') <= now then
        redis.call('HDEL', key, 'i:' .. tid)
        redis.call('ZREM', tombs, member)
        dropped = '1'
      elseif state == 'open' then
        redis.call('ZREM', tombs, member)
      end
    end
    if status == 'unopened' and not has_intents(key) then
      redis.call('DEL', key)
      redis.call('ZREM', index, aid)
    end
    return { 'pruned', dropped }
  end

  if not status then
    if k == 'prepare' then
      return { 'prepare', 'refused', 'account_not_found' }
    elseif k == 'post' or k == 'post_part' then
      return { 'post', 'missing' }
    end
    return { 'not_found' }
  end

  if k == 'prepare' then
    local tid, asset, debit, credit, deadline, horizon =
      args[3], args[4], args[5], args[6], args[7], args[8]
    local refused, res2, inc2 =
      prepare_check(key, prepare_fields(key, tid), asset, debit, credit, deadline, now_ms())
    if refused then
      return refused
    end
    redis.call('HSET', key, 'reserved', res2, 'incoming', inc2,
      'i:' .. tid, 'open ' .. debit .. ' ' .. credit .. ' ' .. horizon)
    redis.call('RPUSH', hist, tid)
    return { 'prepare', 'prepared' }
  end

  if k == 'post' or k == 'post_part' then
    -- Only an open intent moves money: all of it, or for a hold captured in part
    -- (`post_part`, ARGV 4 and 5) the debit and credit given, each at most the intent's;
    -- the rest is given back in the same step. The intent keeps its own amounts.
    local tid = args[3]
    local v = redis.call('HGET', key, 'i:' .. tid)
    if not v then
      return { 'post', 'missing' }
    end
    local state, debit, credit, h = intent_of(v, key)
    if state == 'posted' then
      return { 'post', 'already_posted' }
    elseif state == 'released' then
      return { 'post', 'found_released' }
    end
    local moved_debit, moved_credit = debit, credit
    if k == 'post_part' then
      moved_debit, moved_credit = int(args[4], 'debit'), int(args[5], 'credit')
      if cmp(moved_debit, debit) > 0 or cmp(moved_credit, credit) > 0 then
        return { 'refused', 'capture_exceeds_hold' }
      end
    end
    local bal, res, inc = sums(key)
    redis.call('HSET', key, 'balance', add(bal, sub(moved_credit, moved_debit)),
      'reserved', sub(res, debit), 'incoming', sub(inc, credit),
      'i:' .. tid, 'posted ' .. debit .. ' ' .. credit .. ' ' .. h)
    redis.call('ZADD', tombs, h, aid .. ' ' .. tid)
    return { 'post', 'posted' }
  end

  if k == 'close' then
    if status == 'unopened' then
      return { 'not_found' }
    elseif status == 'open' then
      if has_open_intent(key) then
        return { 'refused', 'account_has_transfers_in_flight' }
      end
      redis.call('HSET', key, 'status', 'closed')
    end
    return account_reply(key)
  end

  if k == 'set_lower_bound' then
    local lower = args[3] -- '': unbounded
    if status == 'unopened' then
      return { 'not_found' }
    end
    local bal, res = sums(key)
    if lower ~= '' and cmp(sub(bal, res), lower) < 0 then
      return { 'refused', 'lower_bound_above_available' }
    end
    if lower ~= '' then
      redis.call('HSET', key, 'lower', lower)
    else
      redis.call('HDEL', key, 'lower')
    end
    return account_reply(key)
  end

  if k == 'get' then
    if status == 'unopened' then
      return { 'not_found' }
    end
    return account_reply(key)
  end
  corrupt('unknown account step ' .. tostring(k))
end

-- ---------------------------------------------------------------------------------------
-- Transfers. KEYS: the transfer, the transfer index, the due index. ARGV: the step, the
-- transfer id, the step's arguments (see `wire.rs`).

local function transfer_reply(kind, key)
  local flat = redis.call('HGETALL', key)
  table.insert(flat, 1, kind)
  return flat
end

-- ---------------------------------------------------------------------------------------
-- The change feed (event.rs `events_of`): each event appended to the shard's stream by the
-- step that makes its change.
local function emit(events, tid, kind, at, refund)
  if refund then
    redis.call('XADD', events, '*', 't', tid, 'k', kind, 'at', at, 'r', refund)
  else
    redis.call('XADD', events, '*', 't', tid, 'k', kind, 'at', at)
  end
end

-- The events of record `key`'s move from state `before` (nil: written new) and refund link
-- `refunded_before`, read from the record as the step left it.
local function feed(events, key, tid, before, refunded_before)
  local f = redis.call('HMGET', key, 'state', 'reason', 'created', 'updated', 'refunded_by')
  local state, reason, created, updated, refunded = f[1], f[2], f[3], f[4], f[5]
  if not before then
    emit(events, tid, 'accepted', created)
  end
  if before ~= state then
    local kind
    if state == 'held' then
      kind = 'held'
    elseif before == 'held' and state == 'applied' then
      kind = 'captured'
    elseif before == 'held' and state == 'canceling' then
      kind = (reason == '"voided"') and 'voided' or 'expired'
    elseif state == 'done' then
      kind = 'done'
    elseif state == 'canceled' then
      kind = 'canceled'
    end
    if kind then
      emit(events, tid, kind, updated)
    end
  end
  if before and refunded and refunded ~= refunded_before then
    emit(events, tid, 'refunded', updated, refunded)
  end
end

-- ---------------------------------------------------------------------------------------
-- The timeline (timeline.rs `step_of`): a step each time a step changes the record's state,
-- its epoch or its refund link, written in the step's own FCALL. Each step is `Step`'s JSON,
-- '{"at":…}'; ids and reasons never hold a quote, so ',{"at":' is found only where a step
-- starts, which is how the second step is found to drop it past the bound.
local TIMELINE_MAX = 16

-- One step: the record's state, owner and epoch after a write at `at` (strings as the hash
-- holds them; owner, reason, refund may be nil), the reason only on a step to canceling or
-- canceled (`TransferRecord::step_at`).
local function step_json(at, state, owner, epoch, reason, refund)
  if state ~= 'canceling' and state ~= 'canceled' then
    reason = nil
  end
  return '{"at":' .. at .. ',"state":"' .. state .. '","owner":'
    .. (owner and ('"' .. owner .. '"') or 'null') .. ',"epoch":' .. epoch
    .. ',"reason":' .. (reason or 'null') .. ',"refund":'
    .. (refund and ('"' .. refund .. '"') or 'null') .. '}'
end

-- `Timeline::push`: `tl` (n steps) with `step` appended, past the bound without the oldest
-- step after the first.
local function timeline_push(tl, n, step)
  if n >= TIMELINE_MAX then
    local second = string.find(tl, ',{"at":', 1, true)
    local third = string.find(tl, ',{"at":', second + 1, true)
    tl = string.sub(tl, 1, second - 1) .. string.sub(tl, third)
    n = n - 1
  end
  return string.sub(tl, 1, -2) .. ',' .. step .. ']', n + 1
end

-- A record written new: its first step, at its creation.
local function first_step(key)
  local f = redis.call('HMGET', key, 'created', 'state', 'owner', 'epoch', 'reason')
  redis.call('HSET', key, 'tl', '[' .. step_json(f[1], f[2], f[3], f[4], f[5], nil) .. ']',
    'tn', 1)
end

-- The step of record `key`'s write from `b` (its fields before: state, epoch, refunded_by,
-- tl, tn, updated, owner, reason, tp, created), read from the record as the step left it.
local function keep_step(key, b)
  local f = redis.call('HMGET', key, 'state', 'owner', 'epoch', 'reason', 'updated',
    'refunded_by')
  local state, owner, epoch, reason, updated, refunded = f[1], f[2], f[3], f[4], f[5], f[6]
  local step
  if state ~= b.state or epoch ~= b.epoch then
    step = step_json(updated, state, owner, epoch, reason, nil)
  elseif refunded and refunded ~= b.refunded_by then
    step = step_json(updated, state, owner, epoch, reason, refunded)
  end
  if not step then
    return
  end
  local tl, n = b.tl, tonumber(b.tn or '0')
  if not tl and b.tp then
    -- A one-phase commit's (`one_phase`): the insert's step and the finish's.
    local first, owner = string.match(b.tp, '^(%S+) (.*)$')
    if not first then
      corrupt('tp of ' .. key .. ': ' .. b.tp)
    end
    tl, n = '[' .. step_json(b.created, first, (owner ~= '') and owner or nil, b.epoch, nil, nil)
      .. ',' .. step_json(b.created, 'done', nil, b.epoch, nil, nil) .. ']', 2
  elseif not tl then
    -- Written before timelines: its one step as it was (`timeline::derived`).
    tl, n = '[' .. step_json(b.updated, b.state, b.owner, b.epoch, b.reason, b.refunded_by)
      .. ']', 1
  end
  tl, n = timeline_push(tl, n, step)
  redis.call('HSET', key, 'tl', tl, 'tn', n)
end

-- Keeps the due index in step with the record: TransferRecord::wake_at.
local function index_wake(key, due, tid)
  local f = redis.call('HMGET', key, 'state', 'lease', 'hold')
  local state, lease, hold = f[1], f[2], f[3]
  if state == 'done' or state == 'canceled' then
    redis.call('ZREM', due, tid)
  elseif state == 'held' then
    local wake = hold or NEVER
    if ms(lease, key .. ' lease') > ms(wake, key .. ' hold') then
      wake = lease
    end
    redis.call('ZADD', due, wake, tid)
  else
    redis.call('ZADD', due, lease, tid)
  end
end

-- ---------------------------------------------------------------------------------------
-- Refund links (record.rs `link_refund`). Postings are `Posting`'s JSON as serde_json writes
-- it; ids and asset codes never hold a quote, so '"amount":' starts only an amount, whose
-- digits are read as text (never as a double) and compared and added exactly.

-- Postings' JSON as its shape (the text without the amounts) and its amounts, in order.
local function postings_of(json)
  local amounts = {}
  for a in string.gmatch(json, '"amount":(%d+)') do
    amounts[#amounts + 1] = a
  end
  return (string.gsub(json, '"amount":%d+', '"amount":')), amounts
end

-- The links the `refunds` field holds: `RefundLink`s as JSON, refund ids without quotes.
local function links_of(json, key)
  local links = {}
  for refund, list in string.gmatch(json, '{"refund":"([^"]+)","amounts":%[([%d,]*)%]}') do
    local amounts = {}
    for a in string.gmatch(list, '%d+') do
      amounts[#amounts + 1] = a
    end
    links[#links + 1] = { refund = refund, amounts = amounts }
  end
  if #links == 0 then
    corrupt('refunds of ' .. key .. ': ' .. json)
  end
  return links
end

local function links_json(links)
  local parts = {}
  for i, l in ipairs(links) do
    parts[i] = '{"refund":"' .. l.refund .. '","amounts":[' .. table.concat(l.amounts, ',')
      .. ']}'
  end
  return '[' .. table.concat(parts, ',') .. ']'
end

local REFUNDS_MAX = 16

-- The spec's postings reversed, as `reversed_postings` writes them: serde writes the spec's
-- id (which holds no quote) before its postings, so the first '"postings":[' opens them,
-- and each posting is `Posting`'s four fields in order, whose ids and asset codes hold no
-- quote either.
local function reversed_of(key)
  local spec = redis.call('HGET', key, 'spec') or corrupt(key .. ' without spec')
  local _, at = string.find(spec, '"postings":[', 1, true)
  local parts = {}
  while at do
    local _, e, from, to, asset, amount = string.find(spec,
      '^{"from":"([^"]*)","to":"([^"]*)","asset":"([^"]*)","amount":(%d+)}', at + 1)
    if not e then
      break
    end
    parts[#parts + 1] = '{"from":"' .. to .. '","to":"' .. from .. '","asset":"' .. asset
      .. '","amount":' .. amount .. '}'
    local c = string.sub(spec, e + 1, e + 1)
    if c == ']' then
      return '[' .. table.concat(parts, ',') .. ']'
    end
    at = (c == ',') and e + 1 or nil
  end
  corrupt('postings of ' .. key .. ': ' .. spec)
end

-- The link of a refund to the original `key`, which is done (its reversed postings `rev`,
-- nil when it keeps none, and its `refunded_by`). ARGV: the step, the original's id, the refund, its postings (JSON), the
-- linker's clock, then the refunds whose links it replaces. Returns the refusal's code, or
-- nil and the links after as JSON (nil: a repeat, nothing changes).
local function link_refund(key, rev, refunded_by, args)
  local refund, postings = args[3], args[4]
  -- The refund's postings are the original's in order, each reversed, of at most what it
  -- moved: `rev` (the spec's postings reversed) but for the amounts, which are those of
  -- `rev`, or of a hold captured in part its captured ones (`moved_postings`).
  local shape, amounts = postings_of(postings)
  local rev_shape, full = postings_of(rev or reversed_of(key))
  local f = redis.call('HMGET', key, 'refunds', 'captured')
  local stored, captured = f[1], f[2]
  if captured then
    full = {}
    for a in string.gmatch(captured, '%d+') do
      full[#full + 1] = a
    end
  end
  if shape ~= rev_shape or #amounts ~= #full then
    return 'refund_must_reverse_original'
  end
  for i = 1, #full do
    if cmp(amounts[i], full[i]) > 0 then
      return 'refund_must_reverse_original'
    end
  end
  local links = (stored and stored ~= '[]') and links_of(stored, key) or {}
  if #links == 0 and refunded_by then
    -- Written before partial refunds: its one refund took everything back.
    links = { { refund = refunded_by, amounts = full } }
  end
  local replacing = {}
  for j = 6, #args do
    replacing[args[j]] = true
  end
  local kept = {}
  for _, l in ipairs(links) do
    if l.refund == refund then
      return nil, nil -- a repeat
    end
    if not replacing[l.refund] then
      kept[#kept + 1] = l
    end
  end
  local taken, all = {}, true
  for i = 1, #full do
    local sum = '0'
    for _, l in ipairs(kept) do
      sum = add(sum, l.amounts[i] or '0')
    end
    taken[i] = sum
    all = all and cmp(sum, full[i]) == 0
  end
  if all then
    return 'original_already_refunded'
  end
  for i = 1, #full do
    if cmp(add(taken[i], amounts[i]), full[i]) > 0 then
      return 'refund_exceeds_original'
    end
  end
  if #kept >= REFUNDS_MAX then
    return 'too_many_refunds'
  end
  kept[#kept + 1] = { refund = refund, amounts = amounts }
  return nil, links_json(kept)
end

local function transfer(keys, args)
  local key, index, due, events = keys[1], keys[2], keys[3], keys[4]
  local k, tid = args[1], args[2]

  if k == 'insert' then
    if redis.call('EXISTS', key) == 0 then
      redis.call('HSET', key, unpack(args, 3))
      redis.call('ZADD', index, 0, tid)
      index_wake(key, due, tid)
      feed(events, key, tid, nil, nil)
      first_step(key)
      return transfer_reply('transfer', key)
    end
    -- Same id: the client compares the bodies (nothing changes either way).
    return transfer_reply('unchanged', key)
  end

  local f = redis.call('HMGET', key, 'state', 'epoch', 'lease', 'hold', 'refunded_by', 'rev',
    'tl', 'tn', 'updated', 'owner', 'reason', 'tp', 'created')
  local state, epoch, lease, hold, refunded_by, rev = f[1], f[2], f[3], f[4], f[5], f[6]
  if not state then
    return { 'not_found' }
  end
  local changed = false

  if k == 'claim' then
    local owner, at, lease_until = args[3], args[4], args[5]
    local expired = ms(lease, key .. ' lease') <= ms(at, 'now')
    local nxt
    if state == 'initial' then
      nxt = 'pending'
    elseif (state == 'pending' or state == 'applied' or state == 'canceling') and expired then
      nxt = state
    elseif state == 'held' and expired and hold and ms(hold, key .. ' hold') <= ms(at, 'now') then
      nxt = 'canceling'
    end
    if nxt then
      if state == 'held' then
        redis.call('HSET', key, 'reason', '"expired"')
      end
      redis.call('HSET', key, 'state', nxt, 'owner', owner, 'lease', lease_until,
        'epoch', add(int(epoch, key .. ' epoch'), '1'), 'updated', at)
      changed = true
    end
  elseif k == 'decide' then
    -- The commit point: compare-and-set on state and epoch.
    local want, to, reason, at = args[3], args[4], args[5], args[6]
    if state == 'pending' and epoch == want
      and (to == 'applied' or to == 'held' or to == 'canceling') then
      redis.call('HSET', key, 'state', to, 'updated', at)
      if reason ~= '' then
        redis.call('HSET', key, 'reason', reason)
      else
        redis.call('HDEL', key, 'reason')
      end
      changed = true
    end
  elseif k == 'capture' or k == 'void' or k == 'capture_part' then
    -- A capture in part (ARGV 6: the captured amounts, a JSON array, '' for all of each)
    -- is a capture that keeps its amounts, once: only the step that captures writes them.
    local owner, at, lease_until = args[3], args[4], args[5]
    local capture = k ~= 'void'
    if state == 'initial' or state == 'pending' then
      return { 'refused', 'transfer_is_not_held' }
    elseif state == 'held' then
      -- A capture resent long after it was made cannot beat the expiry: the store's clock
      -- judges too.
      if capture and hold
        and ms(hold, key .. ' hold') <= math.max(ms(at, 'now'), now_ms()) then
        return { 'refused', 'hold_expired' }
      end
      if capture then
        redis.call('HSET', key, 'state', 'applied')
        if k == 'capture_part' and args[6] ~= '' then
          redis.call('HSET', key, 'captured', args[6])
        elseif k == 'capture_part' then
          redis.call('HDEL', key, 'captured')
        end
      else
        redis.call('HSET', key, 'state', 'canceling', 'reason', '"voided"')
      end
      redis.call('HSET', key, 'owner', owner, 'lease', lease_until,
        'epoch', add(int(epoch, key .. ' epoch'), '1'), 'updated', at)
      changed = true
    end
  elseif k == 'finish' then
    local at = args[3]
    if state == 'applied' or state == 'canceling' then
      redis.call('HSET', key, 'state', (state == 'applied') and 'done' or 'canceled',
        'updated', at)
      redis.call('HDEL', key, 'owner')
      changed = true
    end
  elseif k == 'link_refund' then
    if state ~= 'done' then
      return { 'refused', 'original_is_not_done' }
    end
    local refused, links = link_refund(key, rev, refunded_by, args)
    if refused then
      return { 'refused', refused }
    elseif links then
      redis.call('HSET', key, 'refunds', links, 'refunded_by', args[3], 'updated', args[5])
      changed = true
    end
  elseif k == 'redrive' then
    -- The lease lapses now (a lapsed one stays as it is) and the escalation goes: an
    -- escalated record is re-driven even when its lease lapsed already.
    local at = args[3]
    if state ~= 'done' and state ~= 'canceled' then
      local lapses = ms(lease, key .. ' lease') > ms(at, 'now')
      if lapses then
        redis.call('HSET', key, 'lease', at)
      end
      local cleared = redis.call('HDEL', key, 'escalation') == 1
      changed = lapses or cleared
    end
  elseif k == 'escalate' then
    -- A mark for a person (ARGV 3: `Escalation`'s JSON), once, on a record not terminal.
    -- Nothing else changes: not `updated`, the due index, the feed or the timeline, so it
    -- answers here rather than below.
    if state ~= 'done' and state ~= 'canceled'
      and redis.call('HSETNX', key, 'escalation', args[3]) == 1 then
      return transfer_reply('transfer', key)
    end
  elseif k == 'extend' then
    -- A held transfer's expiry moved later while it has not passed: the store's clock
    -- judges too, as for a capture. An expiry at or past the new one stays (a repeat; never
    -- brought forward). Only the expiry and `updated` change: the due index follows the new
    -- expiry (index_wake), and the feed and the timeline get nothing.
    local later, at = int(args[3], 'until'), int(args[4], 'now')
    if state == 'initial' or state == 'pending' then
      return { 'refused', 'transfer_is_not_held' }
    elseif state == 'held' and hold then
      -- Compared exactly, as integers: an expiry may sit past 2^53 (up to "never"), where
      -- doubles no longer tell neighbours apart.
      hold = int(hold, key .. ' hold')
      local judge = string.format('%d', now_ms())
      if cmp(at, judge) > 0 then
        judge = at
      end
      if cmp(hold, judge) <= 0 then
        return { 'refused', 'hold_expired' }
      end
      if cmp(hold, later) < 0 then
        redis.call('HSET', key, 'hold', later, 'updated', at)
        changed = true
      end
    end
  elseif k ~= 'get' then
    corrupt('unknown transfer step ' .. tostring(k))
  end
  if changed then
    index_wake(key, due, tid)
    feed(events, key, tid, state, refunded_by)
    keep_step(key, { state = state, epoch = epoch, refunded_by = refunded_by, tl = f[7],
      tn = f[8], updated = f[9], owner = f[10], reason = f[11], tp = f[12], created = f[13] })
    return transfer_reply('transfer', key)
  end
  return transfer_reply('unchanged', key)
end

-- ---------------------------------------------------------------------------------------
-- The one-phase commit (TransferOp::OnePhase, docs/protocol.md). KEYS: the transfer, the
-- transfer index, the due index, then each leg's account and its history, then the change
-- feed. ARGV: 'one_phase', the transfer id, its deadline, the number of legs, each leg's
-- account id, asset, debit and credit, then the record's fields as an insert sends them.
-- If the record is absent and every leg's prepare would succeed, the record is kept done
-- and each leg's amounts move into its balance, with no intent: answers 'committed' (the
-- record is `record::one_phase_done` of the one sent, which the client holds). Otherwise
-- this is exactly the insert: 'inserted' (the record as sent), or the record found.
local function one_phase(keys, args)
  local key, index, due = keys[1], keys[2], keys[3]
  local tid, deadline, n = args[2], args[3], tonumber(args[4])
  local events = keys[4 + 2 * n]
  if redis.call('EXISTS', key) == 1 then
    -- Same id: the client compares the bodies (nothing changes either way).
    return transfer_reply('unchanged', key)
  end
  local ok, balances, now = n > 0, {}, now_ms()
  for i = 0, n - 1 do
    local akey = keys[4 + 2 * i]
    local f = prepare_fields(akey, tid)
    local refused, after, _
    if f[1] then
      refused, _, _, after = prepare_check(akey, f, args[6 + 4 * i], args[7 + 4 * i],
        args[8 + 4 * i], deadline, now)
    end
    if not f[1] or refused then
      ok = false
      break
    end
    balances[i] = after
  end
  redis.call('ZADD', index, 0, tid)
  if not ok then
    redis.call('HSET', key, unpack(args, 5 + 4 * n))
    index_wake(key, due, tid)
    feed(events, key, tid, nil, nil)
    first_step(key)
    return { 'inserted' }
  end
  -- The record as `record::one_phase_done` keeps it: done, no owner, updated when created,
  -- its timeline the insert's step and the finish's.
  local fields, created, sent = {}, nil, {}
  for j = 5 + 4 * n, #args, 2 do
    local f, v = args[j], args[j + 1]
    sent[f] = v
    if f == 'state' then
      v = 'done'
    end
    if f ~= 'owner' and f ~= 'updated' then
      table.insert(fields, f)
      table.insert(fields, v)
    end
    if f == 'created' then
      table.insert(fields, 'updated')
      table.insert(fields, v)
      created = v
    end
  end
  -- Its timeline, the insert's step and the finish's, both at its creation, is not stored:
  -- `tp` (the first step's state and owner) and the record give it to readers and to
  -- `keep_step`.
  table.insert(fields, 'tp')
  table.insert(fields, sent.state .. ' ' .. (sent.owner or ''))
  redis.call('HSET', key, unpack(fields))
  emit(events, tid, 'accepted', created)
  emit(events, tid, 'done', created)
  for i = 0, n - 1 do
    redis.call('HSET', keys[4 + 2 * i], 'balance', balances[i])
    redis.call('RPUSH', keys[5 + 2 * i], tid)
  end
  return { 'committed' }
end

-- ---------------------------------------------------------------------------------------
-- Account history. KEYS: the history.

-- A page of the history: the position of the page's newest entry and the ids up to it,
-- oldest first, at most ARGV[2], all strictly before position ARGV[1].
local function history_page(keys, args)
  local last, before, limit = redis.call('LLEN', keys[1]), tonumber(args[1]), tonumber(args[2])
  if before - 1 < last then
    last = before - 1
  end
  if last < 1 or limit < 1 then
    return { 0, {} }
  end
  return { last, redis.call('LRANGE', keys[1], math.max(0, last - limit), last - 1) }
end

-- Brings the history of xfer_6 and older (a sorted set of "<seq> <transfer>" by seq) to the
-- list this layout keeps, in the same order, in one step; a list is left as it is. Answers
-- how many entries it moved.
local function history_to_list(keys, args)
  local key = keys[1]
  if redis.call('TYPE', key).ok ~= 'zset' then
    return 0
  end
  local ids = {}
  for i, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    ids[i] = string.match(m, '^%d+ (.+)$') or corrupt('history entry ' .. m .. ' in ' .. key)
  end
  redis.call('DEL', key)
  for i = 1, #ids, 1000 do
    redis.call('RPUSH', key, unpack(ids, i, math.min(i + 999, #ids)))
  end
  return #ids
end

-- ---------------------------------------------------------------------------------------
-- Tombstones whose horizon the store's clock has passed, at most ARGV[1] of them.
-- KEYS: the tombstone index.
local function tombs_due(keys, args)
  return redis.call('ZRANGEBYSCORE', keys[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(args[1]))
end

-- The change feed after position ARGV[1] ('<ms>-<seq>'), at most ARGV[2] entries: the last
-- id retention dropped and the entries. KEYS: the change feed, its last dropped id.
local function events_after(keys, args)
  local dropped = redis.call('GET', keys[2]) or '0-0'
  return { dropped, redis.call('XRANGE', keys[1], '(' .. args[1], '+', 'COUNT', args[2]) }
end

-- Retention: drops at most ARGV[2] of the oldest entries written before the millisecond
-- ARGV[1] (stream ids are the server's clock), noting the last one dropped. KEYS: as
-- `events_after`'s. (The stream's own `max-deleted-entry-id` ignores trims in Redis 7.0.)
local function trim_events(keys, args)
  local old = redis.call('XRANGE', keys[1], '-', '(' .. args[1] .. '-0', 'COUNT', args[2])
  if #old == 0 then
    return 0
  end
  local ids = {}
  for i, e in ipairs(old) do
    ids[i] = e[1]
  end
  redis.call('XDEL', keys[1], unpack(ids))
  redis.call('SET', keys[2], ids[#ids])
  return #ids
end

redis.register_function('xfer_7_account', account)
redis.register_function('xfer_7_transfer', transfer)
redis.register_function('xfer_7_one_phase', one_phase)
redis.register_function { function_name = 'xfer_7_tombs_due', callback = tombs_due,
  flags = { 'no-writes' } }
redis.register_function { function_name = 'xfer_7_events', callback = events_after,
  flags = { 'no-writes' } }
redis.register_function('xfer_7_trim_events', trim_events)
redis.register_function { function_name = 'xfer_7_history', callback = history_page,
  flags = { 'no-writes' } }
redis.register_function('xfer_7_history_to_list', history_to_list)
