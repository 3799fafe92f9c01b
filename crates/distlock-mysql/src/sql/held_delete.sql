DELETE t FROM `{table}` t FORCE INDEX (PRIMARY) WHERE t.name IN ({names}) AND t.fence <= ?
