package main

import "github.com/spf13/cobra"

func newConfig() *cobra.Command { return &cobra.Command{Use: "config"} }
