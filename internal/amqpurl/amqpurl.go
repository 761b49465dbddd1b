// Package amqpurl checks and shows RabbitMQ broker URLs
// (amqp://user:password@host:port/vhost) for the parts of the platform
// that take one: the queue-proxy's consumers, the autoscaler's queue
// reads, the controller's trigger checks and the commands' flags. A URL
// holds a password: nothing here quotes one, in an error or otherwise.
package amqpurl

import (
	"errors"
	"net/url"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Check reports why raw is not an AMQP URL that amqp091-go dials, without
// quoting it.
func Check(raw string) error {
	_, err := amqp.ParseURI(raw)
	if urlErr, ok := errors.AsType[*url.Error](err); ok {
		// url.Error quotes the URL.
		err = urlErr.Err
	}
	return err
}

// Redact returns raw without its password, for errors and logs; a URL
// that does not parse shows as "(invalid URL)".
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}
