SELECT floor FROM "{hw}" WHERE namespace = $1 FOR SHARE
