package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sless.dev/sless/adminapi"
	"sless.dev/sless/runs"
	"sless.dev/sless/runs/runclient"
)

func newRunsCommand() *cobra.Command {
	var limit int
	var state string
	cmd := &cobra.Command{
		Use:   "runs NAMESPACE/NAME",
		Short: "List a function's runs (asynchronous invocations), the newest first",
		Args:  cobra.ExactArgs(1),
	}
	c := adminFlags(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "runs to show")
	cmd.Flags().StringVar(&state, "state", "", "only runs in this state: queued, running, succeeded, failed, cancelled or expired")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		_, _, path := functionPath(args[0])
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if state != "" {
			q.Set("state", state)
		}
		var list adminapi.RunList
		raw, err := c.get(path+"/runs?"+q.Encode(), &list)
		if err != nil {
			return err
		}
		if c.output == "json" {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tSTATUS\tAGE\tTOOK\tERROR")
		for _, r := range list.Runs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Attempts, orDash(r.Status), age(r.CreatedAt), took(r), r.Error)
		}
		return tw.Flush()
	}
	return cmd
}

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run ID",
		Short: "Show a run: its state, attempts and, once it ended, the function's answer",
		Args:  cobra.ExactArgs(1),
	}
	c := adminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var v adminapi.RunView
		raw, err := c.get("/v1/runs/"+url.PathEscape(args[0]), &v)
		if err != nil {
			return err
		}
		if c.output == "json" {
			_, err := cmd.OutOrStdout().Write(raw)
			return err
		}
		describeRun(cmd.OutOrStdout(), v)
		return nil
	}
	return cmd
}

// describeRun shows a run as describe shows a function.
func describeRun(w io.Writer, v adminapi.RunView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID:\t%s\nFunction:\t%s/%s\nState:\t%s\nAttempts:\t%d\nCreated:\t%s (%s ago)\n",
		v.ID, v.Namespace, v.Function, v.State, v.Attempts, v.CreatedAt.Local().Format(time.RFC3339), age(v.CreatedAt))
	if v.StartedAt != nil {
		fmt.Fprintf(tw, "Started:\t%s\n", v.StartedAt.Local().Format(time.RFC3339))
	}
	if v.CompletedAt != nil {
		fmt.Fprintf(tw, "Completed:\t%s (took %s)\n", v.CompletedAt.Local().Format(time.RFC3339), took(v.Run))
	}
	if v.Error != "" {
		fmt.Fprintf(tw, "Error:\t%s\n", v.Error)
	}
	if v.Parent != "" {
		fmt.Fprintf(tw, "Made by:\t%s (the chain's run %d)\n", v.Parent, v.Depth+1)
	}
	if v.Next != "" {
		fmt.Fprintf(tw, "Passed on to:\t%s\n", v.Next)
	}
	switch {
	case v.PublishTo == "":
	case v.PublishedAt != nil:
		fmt.Fprintf(tw, "Published to:\tqueue %s at %s\n", v.PublishTo, v.PublishedAt.Local().Format(time.RFC3339))
	default:
		fmt.Fprintf(tw, "Published to:\tqueue %s: waiting for the broker\n", v.PublishTo)
	}
	_ = tw.Flush()
	res := v.Result
	if res == nil {
		return
	}
	fmt.Fprintf(w, "Result: %d %s, %d bytes\n", res.Status, cmp.Or(res.ContentType, "no Content-Type"), res.Size)
	switch {
	case res.Binary:
		fmt.Fprintf(w, "  (binary: GET /runs/%s/result on the activator serves it)\n", v.ID)
	case res.Body != "":
		in := &indented{w: w}
		_, _ = io.WriteString(in, res.Body)
		if in.mid {
			fmt.Fprintln(w)
		}
		if res.Truncated {
			fmt.Fprintln(w, "  (truncated)")
		}
	}
}

// took is how long a run took from its creation to its end, "-" before.
func took(r runs.Run) string {
	if r.CompletedAt == nil {
		return "-"
	}
	return r.CompletedAt.Sub(r.CreatedAt).Round(time.Millisecond).String()
}

func orDash(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// invokeAsync submits req as a run and prints its id; with wait, follows
// it to its end and prints the function's answer as invoke does.
func invokeAsync(ctx context.Context, out io.Writer, req *http.Request, wait bool, save string) error {
	req.Header.Set("Prefer", runs.PreferAsync)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("submit a run: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("submit a run: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("the run was not accepted: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var a runs.Accepted
	if err := json.Unmarshal(body, &a); err != nil || !runs.ValidID(string(a.ID)) {
		return fmt.Errorf("the activator's answer to a run is not one: %q", body)
	}
	fmt.Fprintf(out, "run %s %s\n", a.ID, a.State)
	if !wait {
		return nil
	}
	c := &runclient.Client{Base: req.URL.Scheme + "://" + req.URL.Host}
	r, err := c.Follow(ctx, a.ID)
	if err != nil {
		return fmt.Errorf("run %s: %w (it goes on: `sless run %s` shows it)", a.ID, err, a.ID)
	}
	fmt.Fprintf(out, "run %s %s after %d attempt(s) in %s\n", r.ID, r.State, r.Attempts, took(r))
	if r.State != runs.Succeeded {
		if r.Status > 0 {
			_ = printResult(ctx, out, c, r, save)
		}
		return fmt.Errorf("run %s %s: %s", r.ID, r.State, r.Error)
	}
	return printResult(ctx, out, c, r, save)
}

// printResult prints the answer of r, an ended run, as invoke prints a
// function's.
func printResult(ctx context.Context, out io.Writer, c *runclient.Client, r runs.Run, save string) error {
	resp, err := c.Result(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Fprintf(out, "%s\n", resp.Status)
	dst, closeDst, err := bodyDestination(out, save)
	if err != nil {
		return err
	}
	w := &lastByte{w: dst}
	_, err = io.Copy(w, resp.Body)
	err = errors.Join(err, closeDst())
	if (save == "" || save == "-") && w.last != 0 && w.last != '\n' {
		fmt.Fprintln(out)
	}
	if errors.Is(err, errBinary) {
		return fmt.Errorf("the answer is binary (%s): not written to the terminal; --save FILE writes it to a file",
			resp.Header.Get("Content-Type"))
	}
	return err
}
