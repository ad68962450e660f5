/* Writes under a standing grant (docs/design.md §12): one grant of USES uses; two actions, the first proposed twice
   at once (the same call raced, or retried); a proposal the grant covers takes a use (grant_use.lua) and is then
   issued directly as running (grant_run.lua) in the action's own slot: two steps, and a sidecar may die between
   them. A proposal the grant does not cover becomes a card, which the user may confirm (claim.lua). A holder whose
   request was never sent puts the card back (release.lua) and the user may confirm it later.
   ATOMIC: grant_use checks and takes the use in one step (0: a read, then a write, as a client-side
   check-then-set would do). */

#ifndef ATOMIC
#define ATOMIC 1
#endif

#define USES 1
#define NONE 0
#define READY 1
#define CONSUMED 2
#define RUNNING 1
#define SETTLED 2

byte taken = 0;                 /* uses taken (the grant's counter) */
bool used[3];                   /* actions that took a use (the grant's set); index 1..2 */
byte card[3];                   /* per action: NONE, READY, CONSUMED */
byte rec[3];                    /* per action: NONE, RUNNING, SETTLED */
byte sends[3];                  /* execute requests per action */
byte grant_sends = 0;           /* execute requests sent by a holder that ran under the grant */

/* one holder of a claim (by grant or by card): send once, or put the card back before sending */
inline execute(a, by_grant) {
  if
  :: atomic { rec[a] == RUNNING -> rec[a] = NONE; card[a] = READY }     /* release: never sent */
  :: d_step { sends[a]++; if :: by_grant -> grant_sends++ :: else -> skip fi }; rec[a] = SETTLED
  :: true -> skip                                                        /* crash; the lease lapses */
  fi
}

proctype Invoker(byte a) {
  bool took = false;
  bool won = false;
  byte seen;
#if ATOMIC
  atomic {                                              /* lua/grant_use */
    if
    :: used[a] -> took = true                           /* again: this action took a use before */
    :: !used[a] && taken < USES -> used[a] = true; taken++; took = true
    :: else -> skip                                     /* spent */
    fi
  }
#else
  if
  :: used[a] -> took = true
  :: else ->
       seen = taken;                                    /* read ... */
       if
       :: seen < USES -> used[a] = true; taken = seen + 1; took = true   /* ... then write */
       :: else -> skip
       fi
  fi;
#endif
  if
  :: took ->
       if
       :: true -> goto done                             /* died between the two steps: the use is lost */
       :: true -> skip
       fi;
       atomic {                                         /* lua/grant_run */
         if
         :: rec[a] == NONE && card[a] != READY -> rec[a] = RUNNING; card[a] = CONSUMED; won = true
         :: else -> skip                                /* the record (replay) or the waiting card */
         fi
       };
       if :: won -> execute(a, true) :: else -> skip fi
  :: else ->
       atomic { if :: rec[a] == NONE && card[a] == NONE -> card[a] = READY :: else -> skip fi }  /* lua/issue */
  fi;
done:
  skip
}

proctype User(byte a) {                                 /* confirms the action's card, when there is one */
  bool won = false;
  atomic {                                              /* lua/claim */
    if
    :: rec[a] == NONE && card[a] == READY -> card[a] = CONSUMED; rec[a] = RUNNING; won = true
    :: else -> skip
    fi
  };
  if :: won -> execute(a, false) :: else -> skip fi
}

init {
  atomic {
    run Invoker(1); run Invoker(1); run Invoker(2);
    run User(1); run User(2)
  }
}

/* never more uses taken than granted */
ltl uses_bounded { [] (taken <= USES) }
/* never more writes under the grant than it has uses */
ltl grant_writes_bounded { [] (grant_sends <= USES) }
/* an action executes at most once, whether by card or by grant */
ltl at_most_once { [] (sends[1] <= 1 && sends[2] <= 1) }
