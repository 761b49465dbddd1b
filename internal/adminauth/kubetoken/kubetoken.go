// Package kubetoken keeps an adminauth.Guard on the admin token of a
// Kubernetes Secret. The activators generate the Secret when it is
// missing, so that an install is guarded from its first minute without a
// step for the user to forget, and every holder follows it as it is
// rotated or deleted, without a restart. When no token can be had (the
// Secret cannot be read, or created), the Guard refuses the admin API and
// says which Secret to create: a guard that fails open would leave every
// pod that reaches the port in charge of every Function.
package kubetoken

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"sless.dev/sless/internal/adminauth"
	"sless.dev/sless/internal/cachesync"
)

// The admin token's Secret as config/ installs sless: the activators' and
// the autoscaler's namespace, and the key that holds the token.
const (
	DefaultName      = "sless-admin"
	DefaultNamespace = "sless-system"
	Key              = "token"
)

// Defaults of a Secret's retries and calls.
const (
	DefaultRetryBackoff = time.Second
	maxRetryBackoff     = time.Minute
	callTimeout         = 10 * time.Second
)

// Secret sets a Guard from the admin token's Secret and follows it.
type Secret struct {
	client          kubernetes.Interface
	namespace, name string
	guard           *adminauth.Guard
	log             *slog.Logger

	// Generate creates the Secret with a random token when it is missing
	// at the start or deleted later (the activators). Without, a missing
	// Secret refuses the admin API until someone creates it.
	Generate bool
	// RetryBackoff is the first wait before the Secret is read (or
	// created) again after a failure, doubling up to a minute
	// (DefaultRetryBackoff). A watch does not see a Secret it could not
	// create appear unless someone else creates it: a passing outage of
	// the API server, or a role fixed later, is retried here.
	RetryBackoff time.Duration
	// SyncTimeout bounds the watch's first list before its failure is
	// logged (cachesync.DefaultTimeout); the watch keeps trying.
	SyncTimeout time.Duration

	mu     sync.Mutex // serialises what reads the Secret and sets the guard: the watch's events and the retries
	failed chan struct{}
	synced chan struct{}
}

// New returns a Secret that keeps guard on the token of the Secret
// namespace/name, reached with cfg.
func New(cfg *rest.Config, namespace, name string, guard *adminauth.Guard, log *slog.Logger) (*Secret, error) {
	if namespace == "" || name == "" {
		return nil, fmt.Errorf("admin token Secret %q/%q: a namespace and a name are required", namespace, name)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin token Secret %s/%s: %w", namespace, name, err)
	}
	return &Secret{client: client, namespace: namespace, name: name, guard: guard, log: log,
		RetryBackoff: DefaultRetryBackoff, SyncTimeout: cachesync.DefaultTimeout,
		failed: make(chan struct{}, 1), synced: make(chan struct{})}, nil
}

// Run sets the guard from the Secret, creating it first when Generate is
// set and it is missing, and returns; the guard then follows the Secret
// until ctx ends. Several activators starting at once agree on one token:
// each creates the Secret, and those that lose the race read the winner's.
// Run fails only when the watch cannot be set up; a Secret it cannot read
// or create leaves the guard refusing, and is tried again.
func (s *Secret) Run(ctx context.Context) error {
	s.ensure(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace(s.namespace),
		// By name, which a Role's resourceNames can limit list and watch to.
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.name).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.changed,
		UpdateFunc: func(_, obj any) { s.changed(obj) },
		DeleteFunc: func(any) { s.deleted(ctx) },
	})
	if err != nil {
		return fmt.Errorf("watch the admin token Secret %s: %w", s, err)
	}
	factory.Start(ctx.Done())
	go s.retry(ctx)
	go func() {
		err := cachesync.Wait(ctx, s.SyncTimeout, func(ctx context.Context) bool {
			return cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
		}, "activator", "the Secret "+s.String())
		switch {
		case err == nil:
			// Deleted between the first read and the watch's list, it
			// would leave no event to act on. (Missing from the start,
			// the guard refuses, and the retries or the watch end that.)
			if _, exists, _ := inf.GetStore().GetByKey(s.String()); !exists && s.guard.Load().Refused == "" {
				s.deleted(ctx)
			}
			close(s.synced)
		case ctx.Err() == nil:
			s.log.Error("a rotated admin token is not picked up until the watch of its Secret works", "err", err)
		}
	}()
	return nil
}

// Synced is closed once the watch has listed the Secret: from then on a
// change of it reaches the guard.
func (s *Secret) Synced() <-chan struct{} { return s.synced }

func (s *Secret) String() string { return s.namespace + "/" + s.name }

// ensure sets the guard from the Secret as the API server has it,
// creating it when Generate is set and it is missing; when it can do
// neither, it refuses and asks for a retry.
func (s *Secret) ensure(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	secret, err := s.get(ctx)
	if apierrors.IsNotFound(err) && !s.Generate {
		s.refuse(fmt.Sprintf("the admin API is refused: its token's Secret %s does not exist: create it with the token under the key %q", s, Key), nil)
		return // the watch sees it created
	}
	if apierrors.IsNotFound(err) {
		secret, err = s.create(ctx)
		if apierrors.IsAlreadyExists(err) { // another activator won: its token is the one
			secret, err = s.get(ctx)
		}
	}
	if err != nil {
		// The cause (a role's refusal, say) goes to the log, not to
		// whoever asks the port.
		s.refuse(fmt.Sprintf("the admin API is refused: no admin token: the Secret %s could not be read or created (the activator's log says why): create it with the token under the key %q", s, Key), err)
		select {
		case s.failed <- struct{}{}:
		default:
		}
		return
	}
	s.apply(secret)
}

func (s *Secret) get(ctx context.Context) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	secret, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Secret %s: %w", s, err)
	}
	return secret, nil
}

// create creates the Secret with a new random token.
func (s *Secret) create(ctx context.Context) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, Labels: map[string]string{
			"app.kubernetes.io/part-of":    "sless",
			"app.kubernetes.io/managed-by": "sless-activator",
		}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{Key: []byte(NewToken())},
	}
	created, err := s.client.CoreV1().Secrets(s.namespace).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Secret %s: %w", s, err)
	}
	s.log.Info("generated the admin token: read it from its Secret", "secret", s.String(), "key", Key)
	return created, nil
}

// NewToken returns a random token: 32 bytes from crypto/rand, in URL-safe
// base64 without padding (43 characters), which a header and a shell take
// as it is.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program rather than return an error
	return base64.RawURLEncoding.EncodeToString(b)
}

// changed applies the Secret as the watch delivers it.
func (s *Secret) changed(obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok || secret.Name != s.name {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(secret)
}

// deleted recreates the Secret, with a new token, when Generate is set:
// deleting it is a way to rotate the token. Without Generate, or when it
// cannot be recreated, the old token no longer holds and the API is
// refused.
func (s *Secret) deleted(ctx context.Context) {
	s.log.Warn("the admin token's Secret was deleted", "secret", s.String(), "recreate", s.Generate)
	s.ensure(ctx)
}

// apply sets the guard from secret's token; surrounding white space (a
// file's last newline) is not part of it, since no header could carry it.
func (s *Secret) apply(secret *corev1.Secret) {
	token := strings.TrimSpace(string(secret.Data[Key]))
	if token == "" {
		s.refuse(fmt.Sprintf("the admin API is refused: its token's Secret %s has nothing under the key %q: set the token there, or delete the Secret for the activators to generate one", s, Key), nil)
		return
	}
	if st := s.guard.Load(); st.Refused == "" && st.Token == token {
		return // another change of the Secret (its labels, say), or the same seen twice
	}
	s.guard.Set(token)
	s.log.Info("admin token loaded from its Secret", "secret", s.String(), "resourceVersion", secret.ResourceVersion)
}

// refuse refuses the admin API, logging why once per reason and cause.
func (s *Secret) refuse(reason string, cause error) {
	if s.guard.Load().Refused != reason || cause != nil {
		s.log.Error("admin API refused", "reason", reason, "err", cause)
	}
	s.guard.Refuse(reason)
}

// retry reads (or creates) the Secret again after a failure, with a
// backoff, until it succeeds or ctx ends.
func (s *Secret) retry(ctx context.Context) {
	backoff := s.RetryBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.failed:
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.ensure(ctx)
		if s.guard.Load().Refused == "" {
			backoff = s.RetryBackoff
		} else {
			backoff = min(2*backoff, max(maxRetryBackoff, s.RetryBackoff))
		}
	}
}
