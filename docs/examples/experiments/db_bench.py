"""A small database benchmark (stand-in for sysbench/pgbench): short sqlite
transactions in memory; prints transactions per second."""

import random
import sqlite3
import time

TRANSACTIONS = 20_000
random.seed(1)
db = sqlite3.connect(":memory:", isolation_level=None)
db.execute("create table account (id integer primary key, balance integer)")
db.executemany("insert into account values (?, ?)", ((i, 1000) for i in range(10_000)))
start = time.perf_counter()
for _ in range(TRANSACTIONS):
    a, b = random.randrange(10_000), random.randrange(10_000)
    db.execute("begin")
    db.execute("update account set balance = balance - 1 where id = ?", (a,))
    db.execute("update account set balance = balance + 1 where id = ?", (b,))
    db.execute("select balance from account where id = ?", (a,)).fetchone()
    db.execute("commit")
print(f"tps: {TRANSACTIONS / (time.perf_counter() - start):.1f}")
