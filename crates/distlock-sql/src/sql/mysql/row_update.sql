UPDATE `{table}` SET {assignments}`{fence}` = ? WHERE `{key}` = ? AND `{fence}` <= ?
