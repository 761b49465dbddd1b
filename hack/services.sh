#!/usr/bin/env bash
# services.sh: make sure the services the tests talk to are up on loopback,
# starting them with the machine's own commands when they are down:
# RabbitMQ on 127.0.0.1:5672 and PostgreSQL on 127.0.0.1:5432.
set -euo pipefail

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_up() { # name port seconds
	for _ in $(seq "$3"); do
		up "$2" && { echo "$1 is up on 127.0.0.1:$2"; return 0; }
		sleep 1
	done
	echo "$1 did not come up on 127.0.0.1:$2 within $3s" >&2
	return 1
}

if ! up 5432; then
	echo "starting PostgreSQL"
	for version in /etc/postgresql/*; do
		pg_ctlcluster --skip-systemctl-redirect "$(basename "$version")" main start || true
	done
fi
if ! up 5672; then
	echo "starting RabbitMQ"
	rabbitmq-server -detached || true
fi
wait_up PostgreSQL 5432 60
wait_up RabbitMQ 5672 120
