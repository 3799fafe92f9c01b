SELECT highest FROM "{table}" WHERE resource = $1
