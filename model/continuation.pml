/* Countersign continuation protocol (docs/design.md §9, I8), one action and its continuation.
   The action settles once (SUCCEEDED or FAILED); the continuation may be opened before or after
   that. Two generators claim the continuation under a lease, owned by a fresh claim id per claim;
   a lease may lapse at any time (also while its holder is merely slow), and a lapsed lease is
   claimable again under a new claim id. A holder settles the reply (store/lua/cont_settle.lua),
   puts the continuation back after a failed generation (cont_release.lua) or crashes.
   CHECK_CLAIM: settle and release compare the caller's claim id with the current one. */

#ifndef CHECK_CLAIM
#define CHECK_CLAIM 1
#endif

#define NONE 0
#define PENDING 1
#define READY 2
#define RUNNING 3
#define SETTLED 4

#define UNSETTLED 0
#define SUCCEEDED 1
#define FAILED 2

byte rec = UNSETTLED;      /* the action's record: cs:{A}:run */
byte cont = NONE;          /* the continuation: cs:{A}:cont */
byte claim = 0;            /* the current claim id (0: none) */
bool lapsed = false;       /* the current lease has run out */
byte next_id = 1;
byte writes = 0;           /* replies stored */
bool stale_write = false;  /* a reply stored by a caller whose claim was not the current one */
bool stale_release = false;
bool claimed_without_receipt = false;

active proctype Action() {
  atomic {                                             /* lua/settle: SUCCEEDED wakes a pending continuation */
    if
    :: rec = SUCCEEDED; if :: cont == PENDING -> cont = READY :: else -> skip fi
    :: rec = FAILED
    fi
  }
}

active proctype Open() {
  atomic {                                             /* lua/cont_open */
    if
    :: cont == NONE -> if :: rec == SUCCEEDED -> cont = READY :: else -> cont = PENDING fi
    :: else -> skip
    fi
  }
}

active proctype Lease() {
end_lease:
  do
  :: atomic { cont == RUNNING && !lapsed -> lapsed = true }
  od
}

proctype Generator() {
  byte mine = 0;
  byte claims = 0;
end_gen:
  do
  :: claims < 2 ->
       atomic {                                        /* lua/cont_claim */
         if
         :: cont == READY || (cont == RUNNING && lapsed) ->
              if :: rec != SUCCEEDED -> claimed_without_receipt = true :: else -> skip fi;
              cont = RUNNING; lapsed = false; claim = next_id; mine = next_id; next_id++; claims++
         :: else -> skip                               /* pending, running, settled: nothing won */
         fi
       }
  :: mine != 0 ->
       atomic {                                        /* lua/cont_settle */
         if
         :: cont == RUNNING && (!CHECK_CLAIM || claim == mine) ->
              if :: claim != mine -> stale_write = true :: else -> skip fi;
              cont = SETTLED; writes++
         :: else -> skip                               /* lost: nothing stored */
         fi;
         mine = 0
       }
  :: mine != 0 ->
       atomic {                                        /* lua/cont_release: a failed generation */
         if
         :: cont == RUNNING && (!CHECK_CLAIM || claim == mine) ->
              if :: claim != mine -> stale_release = true :: else -> skip fi;
              cont = READY; claim = 0; lapsed = false
         :: else -> skip
         fi;
         mine = 0
       }
  :: mine != 0 -> mine = 0                             /* crash: its lease will lapse */
  od
}

init {
  atomic { run Generator(); run Generator() }
}

ltl reply_once { [] (writes <= 1) }
ltl only_the_holder { [] (!stale_write && !stale_release) }
ltl never_without_receipt { [] (!claimed_without_receipt) }
ltl settled_is_final { [] ((cont == SETTLED) -> [] (cont == SETTLED)) }
