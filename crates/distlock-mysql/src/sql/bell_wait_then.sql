SELECT GET_LOCK('{bell}', {seconds}), TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)), LAST_INSERT_ID(0), {seconds} > 0
  INTO @distlock_bell, @distlock_waited, @distlock_reset, @distlock_patient;
{then};
SELECT CAST(@distlock_bell AS SIGNED), CAST(@distlock_waited AS SIGNED), LAST_INSERT_ID(), ROW_COUNT()
