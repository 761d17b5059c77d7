package main

import "github.com/spf13/cobra"

func newInit() *cobra.Command   { return &cobra.Command{Use: "init"} }
func newConfig() *cobra.Command { return &cobra.Command{Use: "config"} }
func newPlan() *cobra.Command   { return &cobra.Command{Use: "plan"} }
