UPDATE "{hw}" SET floor = GREATEST(floor, $2) WHERE namespace = $1
